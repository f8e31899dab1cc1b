"""The agent a command line describes, the terminal around it, and the session it continues."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator
from typing import IO

import attrs

from orchestrator.agent import AgentClient
from orchestrator.cli.args import Options
from orchestrator.cli.conversation import Conversation
from orchestrator.cli.lines import LineRouter, LineSource, ReadLine, StreamLines, TerminalLines, read_stdin_line
from orchestrator.cli.offered import OfferedTools
from orchestrator.cli.render import Screen, Write, WriteFile
from orchestrator.cli.session_file import TerminalSessionStore
from orchestrator.cli.sessions import last_session, remember_last
from orchestrator.cli.titles import SessionTitles
from orchestrator.config import AgentRunConfig
from orchestrator.extensions.files.sandbox import Sandbox
from orchestrator.extensions.plan_mode import ENTER_TOOL, EXIT_TOOL
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.model import Model
from orchestrator.project.agent import DefaultAgent, open_default_agent
from orchestrator.project.config import Flags, ProjectConfig, load_config
from orchestrator.providers.scripted import PLAN_REQUEST, scripted_tools
from orchestrator.tools import ToolDefinition


class NoSuchSession(Exception):
    """-c with no stored session."""


def flags_of(options: Options) -> Flags:
    """What the command line says about the configuration."""
    return Flags(
        model=options.model,
        allow=options.allow,
        deny=options.deny,
        yes=options.yes,
        trust_project=options.trust_project,
    )


def plan_request(task: str) -> str:
    """The input that asks the model for Plan Mode (``/plan`` and ``--plan-mode``)."""
    return PLAN_REQUEST + task


@attrs.define
class App:
    client: AgentClient
    store: SQLiteSessionStore
    screen: Screen
    router: LineRouter
    conversation: Conversation
    approvals: ToolApprovalExtension
    terminal: TerminalLines | None
    scripted: bool
    db: str
    built: DefaultAgent
    titles: SessionTitles  # where the sessions' titles are kept (the run store in db, or beside it)
    model_spec: str = "scripted"
    permission_sources: dict[str, str] = attrs.field(factory=dict)  # changed in this session
    offered: OfferedTools = attrs.field(factory=OfferedTools)  # the tools the model has been offered

    @property
    def session_id(self) -> str:
        return self.conversation.config.session_id

    def switch_session(self, session_id: str) -> None:
        self.conversation.config = attrs.evolve(self.conversation.config, session_id=session_id)


class _RetryNotes(logging.Handler):
    """Shows a provider's retries ("HTTP 503, retrying in 1.0 s") on the status line."""

    def __init__(self, screen: Screen) -> None:
        super().__init__(logging.INFO)
        self.screen = screen

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("retry ") and isinstance(record.args, tuple) and len(record.args) == 3:
            _, wait, failure = record.args
            self.screen.note(f"{failure}, retrying in {float(wait):.1f} s")  # type: ignore[arg-type]


def _screen(options: Options, write: Write | None) -> tuple[Screen, IO[str] | None]:
    """The screen (stderr in --json mode) and where JSON lines go."""
    if write is not None:
        out: IO[str] = WriteFile(write)  # type: ignore[assignment]
        return Screen(out, tty=False, color=False, trace=options.trace), out if options.json else None
    human = sys.stderr if options.json else sys.stdout
    tty = human.isatty()
    color = tty and not os.environ.get("NO_COLOR")
    return Screen(human, tty=tty, color=color, trace=options.trace), sys.stdout if options.json else None


def _session_id(options: Options, store: SQLiteSessionStore) -> str:
    if options.session:
        return options.session
    if options.continue_last:
        latest = last_session(store, options.db)
        if latest is None:
            raise NoSuchSession(f"no stored session in {options.db} to continue")
        return latest
    return f"session-{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def open_app(
    options: Options,
    *,
    model: Model,
    scripted: bool,
    chat: bool,
    tools: tuple[ToolDefinition, ...] = (),
    read_line: ReadLine | None = None,
    write: Write | None = None,
    interactive: bool | None = None,
    project_config: ProjectConfig | None = None,
) -> AsyncIterator[App]:
    """Everything one command needs; the terminal is restored and the store closed afterwards."""
    async with contextlib.AsyncExitStack() as stack_async, _open_app(
        options, stack_async, model, scripted, chat, tools, read_line, write, interactive, project_config
    ) as app:
        yield app


@contextlib.asynccontextmanager
async def _open_app(
    options: Options,
    stack_async: contextlib.AsyncExitStack,
    model: Model,
    scripted: bool,
    chat: bool,
    tools: tuple[ToolDefinition, ...],
    read_line: ReadLine | None,
    write: Write | None,
    interactive: bool | None,
    project_config: ProjectConfig | None,
) -> AsyncIterator[App]:
    store = TerminalSessionStore(options.db)  # UnusableLocation when its file cannot be made or opened
    retry_log = logging.getLogger("orchestrator.providers")
    with contextlib.ExitStack() as stack:
        stack.callback(store.close)
        titles = SessionTitles.open(options.db)  # the run store in the file keeps them, when it holds one
        stack.callback(titles.close)
        screen, json_out = _screen(options, write)
        sandbox = Sandbox(options.sandbox, network=options.sandbox_network)
        if scripted:
            tools = (*tools, *scripted_tools(options.scripted_delay))
        project = project_config if project_config is not None else load_config(flags_of(options), options.project)
        offered = OfferedTools()
        if chat or options.plan_mode:  # Plan Mode's tools are offered only in and on the way into it
            offered.names.update((ENTER_TOOL, EXIT_TOOL))
        built = await stack_async.enter_async_context(
            open_default_agent(
                project,
                model,
                root=options.root,
                surface="terminal",
                store=store,
                sandbox=sandbox,
                plan_mode=chat or options.plan_mode,
                tools=tools,
                extra=[offered],
            )
        )
        client = built.client
        assert built.approvals is not None
        approvals = built.approvals
        config = AgentRunConfig(
            _session_id(options, store), usage_limits=options.usage_limits, deadline=options.deadline
        )
        stdin_tty = read_line is None and sys.stdin.isatty()
        is_interactive = (stdin_tty and not options.json) if interactive is None else interactive
        terminal: TerminalLines | None = None
        source: LineSource
        if is_interactive and stdin_tty and screen.tty:
            terminal = stack.enter_context(TerminalLines(sys.stdin.fileno(), screen.show_input, screen.commit_input))
            source = terminal
        else:
            source = StreamLines(read_line or read_stdin_line, screen.commit_input)
        router = LineRouter(source, interactive=is_interactive)
        conversation = Conversation(
            client, config, screen, router, json_out=json_out, on_turn=lambda sid: remember_last(options.db, sid)
        )
        handler = _RetryNotes(screen)
        retry_log.addHandler(handler)
        previous_level = retry_log.level
        retry_log.setLevel(logging.INFO)
        try:
            yield App(
                client,
                store,
                screen,
                router,
                conversation,
                approvals,
                terminal,
                scripted,
                options.db,
                built,
                titles,
                model_spec=project.model.value or "scripted",
                offered=offered,
            )
        finally:
            retry_log.removeHandler(handler)
            retry_log.setLevel(previous_level)
            screen.end_turn()

"""The agent a command line describes, the terminal around it, and the session it continues."""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator
from typing import IO

import attrs

from orchestrator.agent import AgentClient, create_agent
from orchestrator.cli.args import DEFAULT_TOOLS_TO_ASK, Options
from orchestrator.cli.conversation import Conversation
from orchestrator.cli.lines import LineRouter, LineSource, ReadLine, StreamLines, TerminalLines, read_stdin_line
from orchestrator.cli.render import Screen, Write, WriteFile
from orchestrator.cli.sessions import last_session, remember_last
from orchestrator.config import AgentRunConfig
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.compaction import CompactionExtension
from orchestrator.extensions.files.bash import BashExtension
from orchestrator.extensions.files.filesystem import FilesystemExtension
from orchestrator.extensions.files.sandbox import Sandbox
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.extensions.steering import SteeringExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension, ToolPolicy, Verdict
from orchestrator.model import Model
from orchestrator.providers.scripted import PLAN_REQUEST, scripted_tools
from orchestrator.tools import ToolDefinition

SYSTEM_PROMPT = "You are a helpful assistant working in a terminal. Be concise."
PLAN_FILES = ("PLAN.md", "plans/**")


class NoSuchSession(Exception):
    """-c with no stored session."""


def tool_policy(options: Options) -> ToolPolicy:
    """Ask before write_file, edit_file and bash unless --yes; --allow and --deny (names or patterns) override."""
    chosen = (*options.allow, *options.deny)
    asked = [name for name in DEFAULT_TOOLS_TO_ASK if not any(fnmatch.fnmatchcase(name, p) for p in chosen)]
    rules: dict[str, Verdict] = {} if options.yes else {name: "ask" for name in asked}
    for name in options.allow:
        rules[name] = "allow"
    for name in options.deny:
        rules[name] = "deny"
    return ToolPolicy(rules)


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

    @property
    def session_id(self) -> str:
        return self.conversation.config.session_id

    def switch_session(self, session_id: str) -> None:
        self.conversation.config = AgentRunConfig(session_id)


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
) -> AsyncIterator[App]:
    """Everything one command needs; the terminal is restored and the store closed afterwards."""
    store = SQLiteSessionStore(options.db)  # UnusableLocation when its file cannot be made or opened
    retry_log = logging.getLogger("orchestrator.providers")
    with contextlib.ExitStack() as stack:
        stack.callback(store.close)
        screen, json_out = _screen(options, write)
        approvals = ToolApprovalExtension(tool_policy(options))
        sandbox = Sandbox(options.sandbox, network=options.sandbox_network)
        extensions: list[AgentExtension] = [
            store,
            SteeringExtension(),
            AskUserExtension(),
            FilesystemExtension(options.root, sandbox=sandbox),
            BashExtension(options.root, sandbox=sandbox),
            CompactionExtension(threshold_tokens=0, keep_last=4),
            approvals,
        ]
        if chat or options.plan_mode:
            extensions.append(PlanModeExtension(root=options.root, writable=PLAN_FILES, sandbox=sandbox))
        if scripted:
            tools = (*tools, *scripted_tools(options.scripted_delay))
        client = await create_agent(
            model, extensions=extensions, tools=tools, history=None, system_prompt=SYSTEM_PROMPT
        )
        config = AgentRunConfig(_session_id(options, store))
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
            yield App(client, store, screen, router, conversation, approvals, terminal, scripted, options.db)
        finally:
            retry_log.removeHandler(handler)
            retry_log.setLevel(previous_level)
            screen.end_turn()

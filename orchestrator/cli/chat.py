"""``chat``: a prompt loop over one session, with slash commands."""

from __future__ import annotations

import trio

from orchestrator.cli.app import App, NoSuchSession, open_app, plan_request
from orchestrator.cli.args import Options
from orchestrator.cli.commands import run_command
from orchestrator.cli.launch import choose_model, configure, introduce, write_stderr
from orchestrator.cli.lines import ReadLine
from orchestrator.cli.render import Write
from orchestrator.cli.signals import watch_interrupts
from orchestrator.model import Model
from orchestrator.tools import ToolDefinition

PROMPT = "> "


class _PromptInterrupts:
    """Ctrl-C at the prompt: clears a typed line, else warns once, then exits."""

    def __init__(self, app: App, scope: trio.CancelScope) -> None:
        self.app = app
        self.scope = scope
        self.armed = False

    def __call__(self) -> None:
        terminal = self.app.terminal
        if terminal is not None and terminal.clear():
            return
        if self.armed:
            self.app.screen.say("")
            self.scope.cancel()
            return
        self.armed = True
        self.app.screen.say("")
        self.app.screen.say("(Ctrl-C again to exit, or /quit)", style="dim")


async def chat_loop(app: App, plan_first: bool, interrupts: _PromptInterrupts) -> None:
    """Prompts until /quit or the end of input; with ``plan_first`` the first input is planned (as /plan)."""
    while True:
        line = await app.router.line(PROMPT)
        interrupts.armed = False
        if line is None:
            return
        text = line.strip()
        if not text:
            continue
        if text.startswith("/"):
            if not await run_command(app, text):
                return
            continue
        if plan_first:
            plan_first = False
            app.conversation.approve_plan_entry = True
            text = plan_request(text)
        await app.conversation.turn(text)


async def chat(
    options: Options,
    *,
    model: Model | None = None,
    tools: tuple[ToolDefinition, ...] = (),
    read_line: ReadLine | None = None,
    write: Write | None = None,
    err: Write = write_stderr,
    handle_sigint: bool = True,
    interactive: bool | None = None,
) -> int:
    """The interactive session; the exit code (0, or 2 for unusable options)."""
    config = configure(options, err)
    if config is None:
        return 2
    chosen = choose_model(options, model, err, config)
    if chosen is None:
        return 2
    try:
        async with open_app(
            options,
            model=chosen[0],
            scripted=chosen[1],
            chat=True,
            tools=tools,
            read_line=read_line,
            write=write,
            interactive=interactive,
            project_config=config,
        ) as app:
            introduce(app, options)
            app.screen.say("type /help for commands", style="dim")
            async with trio.open_nursery() as nursery:
                interrupts = _PromptInterrupts(app, nursery.cancel_scope)
                if handle_sigint:
                    await nursery.start(watch_interrupts, app.conversation, interrupts)
                if app.router.interactive:
                    nursery.start_soon(app.router.pump)
                await app.conversation.answer_left_over(app.store)
                app.conversation.cancelling = False  # Ctrl-C there skips the left-over questions, not the chat
                await chat_loop(app, options.plan_mode, interrupts)
                nursery.cancel_scope.cancel()
    except NoSuchSession as missing:
        err(f"error: {missing}\n")
        return 2
    return 0

"""``run "PROMPT"``: one request, then exit (0 completed, 1 failed, 130 cancelled, 2 unusable options)."""

from __future__ import annotations

import trio

from orchestrator.cli.app import NoSuchSession, open_app
from orchestrator.cli.args import Options
from orchestrator.cli.launch import choose_model, configure, introduce, write_stderr
from orchestrator.cli.lines import ReadLine
from orchestrator.cli.render import Write
from orchestrator.cli.signals import watch_interrupts
from orchestrator.model import Model
from orchestrator.tools import ToolDefinition

EXIT_CODES = {"completed": 0, "cancelled": 130}


async def run(
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
    """Run ``options.prompt`` as one request; the exit code.

    Questions a stopped process left waiting in the session are asked first.
    ``read_line``/``write`` replace the terminal (tests); ``interactive`` says
    whether typed lines may steer (default: stdin is a terminal).
    """
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
            chat=False,
            tools=tools,
            read_line=read_line,
            write=write,
            interactive=interactive,
            project_config=config,
        ) as app:
            introduce(app, options)
            conversation = app.conversation
            async with trio.open_nursery() as nursery:
                if handle_sigint:
                    await nursery.start(watch_interrupts, conversation)
                if app.router.interactive:
                    nursery.start_soon(app.router.pump)
                await conversation.answer_left_over(app.store)
                if conversation.cancelling:
                    app.screen.say("* cancelled", style="yellow")
                    outcome = "cancelled"
                else:
                    outcome = await conversation.turn(options.prompt or "")
                nursery.cancel_scope.cancel()
    except NoSuchSession as missing:
        err(f"error: {missing}\n")
        return 2
    return EXIT_CODES.get(outcome, 1)

"""Slash commands of ``chat``."""

from __future__ import annotations

import uuid

from machines.request import REQUEST
from orchestrator.cli import session_commands
from orchestrator.cli.app import App, plan_request
from orchestrator.cli.sessions import list_sessions

HELP = """\
/plan TASK   ask the model to plan TASK in Plan Mode first (you approve the plan)
/compact     summarize the older part of this session
/sessions    list the stored sessions
/new         start a new session
/diagram     the request machine and the path of the last run
{session}
/help        this list
/quit        leave (also Ctrl-D, or Ctrl-C twice at the prompt)
A line typed while the agent works steers it; a line typed while it asks answers it.""".replace(
    "{session}", session_commands.HELP
)

_NO_ARGUMENTS = frozenset(
    {"/quit", "/exit", "/help", "/new", "/sessions", "/compact", "/diagram", "/usage", "/context", "/mcp"}
)


async def run_command(app: App, line: str) -> bool:
    """Carry out one slash command; False when the chat should end."""
    name, _, rest = line.strip().partition(" ")
    rest = rest.strip()
    screen = app.screen
    if rest and name in _NO_ARGUMENTS:
        screen.say(f"{name} takes no arguments (got {rest!r}); /help lists the commands", style="yellow")
        return True
    if name in ("/quit", "/exit"):
        return False
    if name == "/help":
        for text in HELP.splitlines():
            screen.say(text)
    elif name == "/new":
        session_id = f"session-{uuid.uuid4().hex[:12]}"
        app.switch_session(session_id)
        screen.say(f"new session {session_id}", style="dim")
    elif name == "/sessions":
        list_sessions(app.store, screen, app.db, current=app.session_id, titles=app.titles)
    elif name == "/compact":
        await _compact(app)
    elif name == "/diagram":
        _diagram(app)
    elif name == "/plan":
        if not rest:
            screen.say("usage: /plan WHAT TO PLAN", style="yellow")
        else:
            app.conversation.approve_plan_entry = True
            await app.conversation.turn(plan_request(rest))
    elif name == "/title":
        session_commands.title(app, rest)
    elif name == "/fork":
        session_commands.fork(app, rest)
    elif name == "/export":
        session_commands.export(app, rest)
    elif name == "/usage":
        session_commands.usage(app)
    elif name == "/context":
        session_commands.context(app)
    elif name == "/model":
        session_commands.model(app, rest)
    elif name == "/permissions":
        session_commands.permissions(app, rest)
    elif name == "/mcp":
        session_commands.mcp(app)
    elif name == "/resume":
        await session_commands.resume(app, rest)
    else:
        screen.say(f"unknown command {name} (try /help)", style="yellow")
    return True


async def _compact(app: App) -> None:
    before = len(app.store.messages(app.session_id))
    try:
        await app.client.agent.compact(app.conversation.config)
    except Exception as error:
        app.screen.say(f"compaction failed: {error}", style="red")
        return
    after = len(app.store.messages(app.session_id))
    if after < before:
        app.screen.say(f"compacted: {before} messages -> {after} (a summary and the latest ones)")
    else:
        app.screen.say(f"nothing to compact ({before} messages)")


def _diagram(app: App) -> None:
    region = REQUEST.main
    steps = [s for s in app.client.transitions(app.session_id) if s.region == region.name]
    visited = {s.source for s in steps} | {s.dest for s in steps}
    states = "  ".join(f"[{name}]" if name in visited else name for name in region.state_names)
    app.screen.say(f"request machine, {region.name} region ([visited] in the last run):", style="bold")
    app.screen.say(f"  {states}")
    if not steps:
        app.screen.say("no run of this session in this process yet")
        return
    path = steps[0].source + "".join(f" -{s.trigger}-> {s.dest}" for s in steps)
    app.screen.say(f"last run: {path}")
    app.screen.say("(diagrams/request.svg draws the whole machine; client.trace() gives this path as Mermaid)")

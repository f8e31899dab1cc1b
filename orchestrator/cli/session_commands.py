"""Slash commands of ``chat`` about the session itself: its title, forks, exports, usage, context, model,
permissions, MCP servers, and which session to resume."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence

from orchestrator.cli.app import App
from orchestrator.cli.render import shorten
from orchestrator.cli.sessions import fork_into, summaries
from orchestrator.errors import SessionBusy
from orchestrator.extensions.compaction import estimate_tokens
from orchestrator.extensions.tool_approval import ToolPolicy, Verdict
from orchestrator.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from orchestrator.model import Usage
from orchestrator.observe.export import to_html, to_markdown
from orchestrator.providers.choice import MODEL_SPECS, ModelUnavailable, build_model, names_a_provider
from orchestrator.store.fork import ForkRefused

HELP = """\
/title [TEXT]  show this session's title, or set it
/fork [TURN]   continue in a new session copied from this one (up to turn TURN)
/export [FILE] write this session to FILE: .html for a web page, else Markdown
/usage         tokens in and out, cache reads and writes, per turn and in total
/context       how full the context is, by kind of message
/model [SPEC [EFFORT]]  show the model, or switch to SPEC (with a reasoning effort) for the next turns
/permissions [TOOL allow|ask|deny]  show the tool permissions, or change one for this session
/mcp           the MCP servers and their state
/resume [N|ID] pick a stored session to continue"""


_TOOL_PATTERN = re.compile(r"(?:[A-Za-z0-9_.*?-]|\[!?[A-Za-z0-9_.-]+\])+")
_WHOLE = re.compile(r"[0-9]{1,9}")  # a turn or list number as typed (str.isdigit also takes '²', which int refuses)


def _messages(app: App) -> list[Message]:
    return app.store.messages(app.session_id)


def _store_title(app: App, session_id: str, text: str) -> bool:
    """Set the title, or say in one line why it cannot be kept (the titles file is not writable, or the run store
    that keeps them has nothing of the session yet)."""
    try:
        kept = app.titles.set(session_id, text)
    except OSError as error:
        app.screen.say(f"cannot keep the title of {session_id}: {error.strerror or error}", style="red")
        return False
    if not kept:
        app.screen.say(f"cannot title {session_id} before its first turn is stored", style="yellow")
    return kept


def title(app: App, rest: str) -> None:
    if rest:
        if _store_title(app, app.session_id, rest):
            app.screen.say(f"title: {rest}")
        return
    shown = app.titles.title(app.session_id, _messages(app))
    app.screen.say(f"title: {shown}" if shown else "no title yet: the first input gives one (or /title TEXT)")


def fork(app: App, rest: str) -> None:
    turns: int | None = None
    if rest:
        if not _WHOLE.fullmatch(rest):
            app.screen.say("usage: /fork [TURN] (a turn number; /usage lists them)", style="yellow")
            return
        turns = int(rest)
    source = app.session_id
    target = f"{source.split('-fork-')[0]}-fork-{os.urandom(3).hex()}"
    try:
        copied = fork_into(app.store, app.titles, source, target, turns)
    except ForkRefused as refused:
        app.screen.say(f"cannot fork: {refused.reason}", style="yellow")
        return
    except SessionBusy:
        app.screen.say(f"cannot fork: session {source} has a run that has not ended", style="yellow")
        return
    app.switch_session(target)
    try:
        app.titles.forked(source, target, app.store.messages(source))
    except OSError as error:
        app.screen.say(f"cannot keep the title of {target}: {error.strerror or error}", style="red")
    since = f" up to turn {turns}" if turns is not None else ""
    app.screen.say(f"forked {source}{since} into {target} ({copied} messages); you are in the fork now")


def export(app: App, rest: str) -> None:
    path = os.path.expanduser(rest) if rest else f"{app.session_id}.md"
    messages = _messages(app)
    heading = app.titles.title(app.session_id, messages) or app.session_id
    text = to_html(messages, heading) if path.lower().endswith((".html", ".htm")) else to_markdown(messages, heading)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except (OSError, ValueError) as error:  # ValueError: a path the system cannot take (a NUL byte)
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        app.screen.say(f"cannot write {path}: {reason}", style="red")
        return
    app.screen.say(f"exported {len(messages)} messages to {path}")


def _sum(usages: Sequence[Usage | None]) -> tuple[int, int, int, int, int]:
    """in, out, cache read, cache write, and how many calls reported nothing."""
    reported = [u for u in usages if u is not None]
    return (
        sum(u.input_tokens for u in reported),
        sum(u.output_tokens for u in reported),
        sum(u.cache_read_tokens or 0 for u in reported),
        sum(u.cache_write_tokens or 0 for u in reported),
        len(usages) - len(reported),
    )


def _usage_line(label: str, usages: Sequence[Usage | None]) -> str:
    spent_in, spent_out, read, written, silent = _sum(usages)
    calls = f"{len(usages)} model call" + ("" if len(usages) == 1 else "s")
    unreported = f", {silent} not reported" if silent else ""
    return f"{label}  {spent_in} in, {spent_out} out, cache {read} read / {written} written ({calls}{unreported})"


def usage(app: App) -> None:
    turns = app.conversation.turn_usage
    if not turns:
        app.screen.say("no turn in this process yet")
        return
    for number, (prompt, usages) in enumerate(turns, start=1):
        app.screen.say(_usage_line(f"turn {number}: {shorten(prompt, 30)!r}", usages))
    app.screen.say(_usage_line("total", [u for _, usages in turns for u in usages]), style="bold")


def context(app: App) -> None:
    messages = _messages(app)
    kinds: dict[str, list[Message]] = {"system": [], "user": [], "assistant": [], "tool results": []}
    for message in messages:
        if isinstance(message, SystemMessage):
            kinds["system"].append(message)
        elif isinstance(message, UserMessage):
            kinds["user"].append(message)
        elif isinstance(message, AssistantMessage):
            kinds["assistant"].append(message)
        elif isinstance(message, ToolMessage):
            kinds["tool results"].append(message)
    total = estimate_tokens(messages)
    threshold = app.built.config.compaction_threshold.value
    if threshold:
        full = 100 * total // threshold
        app.screen.say(f"context: about {total} tokens, {full}% of the {threshold} at which it is compacted")
    else:
        app.screen.say(f"context: about {total} tokens in {len(messages)} messages (compaction: /compact)")
    for kind, group in kinds.items():
        tokens = estimate_tokens(group)
        share = f"{100 * tokens // total}%" if total else "0%"
        app.screen.say(f"  {kind:<13} {len(group):>4} messages  about {tokens:>6} tokens  {share:>4}")


def model(app: App, rest: str) -> None:
    if not rest:
        app.screen.say(f"model: {app.model_spec}")
        return
    spec, _, effort = rest.partition(" ")
    effort = effort.strip()
    if len(effort.split()) > 1:
        app.screen.say("usage: /model [SPEC [EFFORT]] (one spec and at most one effort)", style="yellow")
        return
    if spec != "scripted" and not names_a_provider(spec):
        app.screen.say(f"unknown model {spec!r}: use scripted or {MODEL_SPECS}", style="yellow")
        return
    if spec == "scripted" and effort:
        app.screen.say("the scripted model has no reasoning effort", style="yellow")
        return
    try:
        chosen = build_model(None if spec == "scripted" else spec, False, effort=effort or None)
    except ModelUnavailable as problem:
        app.screen.say(f"model not switched: {problem}", style="yellow")
        return
    app.client.agent.model = chosen
    app.model_spec = rest
    app.screen.say(f"model: {rest} from the next turn")


def permissions(app: App, rest: str) -> None:
    policy = app.approvals.policy
    if rest:
        tool, _, verdict = rest.partition(" ")
        verdict = verdict.strip()
        if verdict not in ("allow", "ask", "deny"):
            app.screen.say("usage: /permissions TOOL allow|ask|deny (a tool name or pattern)", style="yellow")
            return
        problem = _tool_problem(tool, app.offered.names)
        if problem is not None:
            app.screen.say(f"permissions not changed: {problem}", style="yellow")
            return
        chosen: Verdict = "allow" if verdict == "allow" else "ask" if verdict == "ask" else "deny"
        rules = {name: value for name, value in policy.rules.items() if name != tool}
        app.approvals.policy = ToolPolicy({tool: chosen, **rules}, policy.default)
        app.permission_sources[tool] = "this session"
        app.screen.say(f"{tool}: {verdict} for the rest of this session")
        return
    sources = {pattern: sourced.source for pattern, sourced in app.built.config.permissions.items()}
    sources.update(app.permission_sources)
    for pattern, rule in policy.rules.items():
        shown = rule if isinstance(rule, str) else "policy"  # a callable rule decides each call
        app.screen.say(f"  {pattern:<16} {shown:<6} [{sources.get(pattern, 'this session')}]")
    default = policy.default if isinstance(policy.default, str) else "decided by a policy"
    app.screen.say(f"  every other tool: {default}", style="dim")


def _tool_problem(pattern: str, offered: set[str]) -> str | None:
    """Why ``pattern`` cannot be a rule (None: it can): not of a tool name's form, or matching none of the
    ``offered`` tools (not checked before the model was first offered any)."""
    if not _TOOL_PATTERN.fullmatch(pattern):
        return (
            f"{pattern!r} is not a tool name or pattern (letters, digits, '_', '-', '.', "
            "and the wildcards *, ? and [...])"
        )
    if offered and not any(fnmatch.fnmatchcase(name, pattern) for name in offered):
        return f"no tool matches {pattern!r} (the tools offered so far: {', '.join(sorted(offered))})"
    return None


def mcp(app: App) -> None:
    entries = app.built.config.mcp
    if not entries:
        app.screen.say("no MCP servers (a project's .mcp.json names them)")
        return
    extension = app.built.mcp
    for entry in entries:
        if entry.reason is not None:
            state = f"not started: {entry.reason}"
        else:
            state = extension.state(entry.server.name) if extension is not None else "not started"
        app.screen.say(f"  {entry.server.name}  {entry.server.describe()}  {state}  [{entry.source}]")


async def resume(app: App, rest: str) -> None:
    listed = summaries(app.store, app.db, app.titles)
    if not listed:
        app.screen.say(f"no stored sessions in {app.db}")
        return
    if not rest:
        for number, summary in enumerate(listed, start=1):
            mark = "*" if summary.session_id == app.session_id else " "
            app.screen.say(f"{mark}{number:>3}  {summary.session_id}  {summary.messages:>4} messages  {summary.title}")
        answer = await app.router.line("resume which (number or id; empty keeps this one)> ")
        rest = (answer or "").strip()
        if not rest:
            return
    chosen = next((s for s in listed if s.session_id == rest), None)
    if chosen is None and _WHOLE.fullmatch(rest) and 1 <= int(rest) <= len(listed):
        chosen = listed[int(rest) - 1]
    if chosen is None and _WHOLE.fullmatch(rest):
        app.screen.say(f"no session number {rest}: there are {len(listed)} (/resume lists them)", style="yellow")
        return
    if chosen is None:
        app.screen.say(f"no stored session {rest!r} (/resume lists them)", style="yellow")
        return
    app.switch_session(chosen.session_id)
    app.screen.say(f"resuming session {chosen.session_id} ({chosen.messages} stored messages): {chosen.title}")

"""``sessions list|show ID|delete ID``: the stored sessions, and which one ``-c`` continues.

The session a command line last ran is remembered in ``<db>.last`` beside the
database, so ``-c`` continues it; without that file, the newest stored session.
"""

from __future__ import annotations

import os

import attrs

from orchestrator.cli.render import Screen, call_line, result_line, shorten
from orchestrator.cli.titles import set_title, set_titles, title_of
from orchestrator.extensions.session_store import SessionStoreExtension
from orchestrator.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from orchestrator.store import SessionLocked


@attrs.frozen
class SessionSummary:
    session_id: str
    messages: int
    title: str  # the one set, else the first input


class SessionsRefused(Exception):
    """A ``sessions`` action that cannot be done; the message says why (printed as one line on stderr)."""


def _last_file(db: str) -> str:
    return db + ".last"


def remember_last(db: str, session_id: str) -> None:
    """Note ``session_id`` as the one ``-c`` continues."""
    with open(_last_file(db), "w", encoding="utf-8") as handle:
        handle.write(session_id + "\n")


def last_session(store: SessionStoreExtension, db: str) -> str | None:
    """The session ``-c`` continues: the last one run, else the newest stored one; None when none is stored."""
    stored = store.sessions()
    try:
        with open(_last_file(db), encoding="utf-8") as handle:
            noted = handle.read().strip()
    except OSError:
        noted = ""
    if noted and noted in stored:
        return noted
    return stored[-1] if stored else None


def summaries(store: SessionStoreExtension, db: str) -> list[SessionSummary]:
    """Stored sessions, newest first, with their titles."""
    found = []
    titles = set_titles(db)
    for session_id in reversed(store.sessions()):
        messages = store.messages(session_id)
        found.append(SessionSummary(session_id, len(messages), title_of(db, session_id, messages, titles)))
    return found


def list_sessions(store: SessionStoreExtension, screen: Screen, db: str, current: str | None = None) -> int:
    listed = summaries(store, db)
    if not listed:
        screen.say(f"no stored sessions in {db}")
        return 0
    last = last_session(store, db)
    for summary in listed:
        mark = "*" if summary.session_id == current else ("c" if summary.session_id == last else " ")
        screen.say(f"{mark} {summary.session_id}  {summary.messages:>4} messages  {shorten(summary.title, 60)}")
    screen.say("(* this session, c the one -c continues)" if current else "(c: the session -c continues)", style="dim")
    return 0


def show_session(store: SessionStoreExtension, screen: Screen, session_id: str, db: str) -> int:
    messages = store.messages(session_id)
    if not messages:
        raise SessionsRefused(f"no session {session_id} in {db}")
    screen.say(f"session {session_id}: {len(messages)} messages", style="bold")
    for message in messages:
        if isinstance(message, UserMessage):
            screen.say(f"user: {message.text}", style="bold")
        elif isinstance(message, AssistantMessage):
            if message.content:
                screen.say(f"assistant: {message.content}")
            for call in message.tool_calls:
                screen.say(f"-> {call_line(call)}", style="cyan")
        elif isinstance(message, ToolMessage):
            screen.say(f"<- {result_line(message)}", style="dim")
        elif isinstance(message, SystemMessage):
            screen.say(f"system: {shorten(message.content, 100)}", style="dim")
    return 0


def delete_session(store: SessionStoreExtension, screen: Screen, session_id: str, db: str) -> int:
    """Remove every row of a session: messages, waits and answers, Plan Mode, rows set aside (refused while a
    process runs it)."""
    if session_id not in store.sessions() and not store.pending_approvals(session_id):
        raise SessionsRefused(f"no session {session_id} in {db}")
    try:
        lock = store.store.lock_session(session_id)
    except SessionLocked:
        raise SessionsRefused(f"session {session_id} is running in another process; not deleted") from None
    try:
        store.store.delete_session(session_id)
    finally:
        lock.release()
    if last_session(store, db) is None and os.path.exists(_last_file(db)):
        os.remove(_last_file(db))
    screen.say(f"deleted session {session_id}")
    return 0


def title_session(store: SessionStoreExtension, screen: Screen, session_id: str, db: str, text: str | None) -> int:
    """Show ``session_id``'s title, or set it to ``text``."""
    messages = store.messages(session_id)
    if not messages and session_id not in store.sessions():
        raise SessionsRefused(f"no session {session_id} in {db}")
    if text is not None:
        set_title(db, session_id, text)
    screen.say(title_of(db, session_id, messages))
    return 0


def export_session(store: SessionStoreExtension, screen: Screen, session_id: str, db: str, path: str) -> int:
    """Write ``session_id`` to ``path``: an HTML page for .html/.htm, else Markdown."""
    from orchestrator.observe.export import to_html, to_markdown

    if session_id not in store.sessions():
        raise SessionsRefused(f"no session {session_id}")
    messages = store.messages(session_id)
    heading = title_of(db, session_id, messages) or session_id
    text = to_html(messages, heading) if path.lower().endswith((".html", ".htm")) else to_markdown(messages, heading)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise SessionsRefused(f"cannot write {path}: {error.strerror or error}") from None
    screen.say(f"exported {len(messages)} messages to {path}")
    return 0


def fork_stored(
    store: SessionStoreExtension, screen: Screen, session_id: str, db: str, target: str | None, turn: int | None
) -> int:
    """Copy ``session_id`` (up to ``turn``) into ``target`` (default: a new id); the new id is printed."""
    from orchestrator.store.fork import ForkRefused, fork_session

    new = target or f"{session_id}-fork-{os.urandom(3).hex()}"
    try:
        copied = fork_session(store.store, session_id, new, turns=turn)
    except ForkRefused as refused:
        raise SessionsRefused(refused.reason) from None
    set_title(db, new, f"{title_of(db, session_id, store.messages(session_id))} (fork)")
    screen.say(f"forked {session_id} into {new} ({copied} messages)")
    return 0

"""``sessions list|show ID|delete ID``: the stored sessions, and which one ``-c`` continues.

The session a command line last ran is remembered in ``<db>.last`` beside the
database, so ``-c`` continues it; without that file, the newest stored session.
"""

from __future__ import annotations

import os

import attrs

from orchestrator.cli.render import Screen, call_line, result_line, shorten
from orchestrator.extensions.session_store import SessionStoreExtension
from orchestrator.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from orchestrator.store import SessionLocked


@attrs.frozen
class SessionSummary:
    session_id: str
    messages: int
    title: str  # the first input


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


def summaries(store: SessionStoreExtension) -> list[SessionSummary]:
    """Stored sessions, newest first."""
    found = []
    for session_id in reversed(store.sessions()):
        messages = store.messages(session_id)
        title = next((m.text for m in messages if isinstance(m, UserMessage)), "")
        found.append(SessionSummary(session_id, len(messages), title))
    return found


def list_sessions(store: SessionStoreExtension, screen: Screen, db: str, current: str | None = None) -> int:
    listed = summaries(store)
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
        screen.say(f"no session {session_id} in {db}")
        return 1
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
        screen.say(f"no session {session_id} in {db}")
        return 1
    try:
        lock = store.store.lock_session(session_id)
    except SessionLocked:
        screen.say(f"session {session_id} is running in another process; not deleted")
        return 1
    try:
        store.store.delete_session(session_id)
    finally:
        lock.release()
    if last_session(store, db) is None and os.path.exists(_last_file(db)):
        os.remove(_last_file(db))
    screen.say(f"deleted session {session_id}")
    return 0

"""``sessions list|show ID|delete ID``: the stored sessions, and which one ``-c`` continues.

The session a command line last ran is remembered in ``<db>.last`` beside the
database, so ``-c`` continues it; without that file, the newest stored session.
When the database file also holds a run store (``SessionTitles.runs``), its sessions,
titles and runs are the run store's too: a web node on the file sees what these commands do.
"""

from __future__ import annotations

import os

import attrs

from orchestrator.cli.render import Screen, call_line, result_line, shorten
from orchestrator.cli.titles import SessionTitles
from orchestrator.errors import SessionBusy
from orchestrator.extensions.session_store import SessionStoreExtension
from orchestrator.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from orchestrator.store import SessionCarried, SessionLocked


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


def _stored(store: SessionStoreExtension, titles: SessionTitles) -> list[str]:
    """The stored sessions, oldest first: the run store's (runs or messages) when the file holds one."""
    return titles.runs.sessions() if titles.runs is not None else store.sessions()


def summaries(store: SessionStoreExtension, db: str, titles: SessionTitles | None = None) -> list[SessionSummary]:
    """Stored sessions, newest first, with their titles (``titles``: where they are kept; default the file's)."""
    titles = titles or SessionTitles(db)
    found = []
    ids = _stored(store, titles)
    chosen = titles.chosen(ids)
    for session_id in reversed(ids):
        messages = store.messages(session_id)
        found.append(SessionSummary(session_id, len(messages), titles.title(session_id, messages, chosen)))
    return found


def list_sessions(
    store: SessionStoreExtension,
    screen: Screen,
    db: str,
    current: str | None = None,
    titles: SessionTitles | None = None,
) -> int:
    listed = summaries(store, db, titles)
    if not listed:
        screen.say(f"no stored sessions in {db}")
        return 0
    last = last_session(store, db)
    for summary in listed:
        mark = "*" if summary.session_id == current else ("c" if summary.session_id == last else " ")
        screen.say(f"{mark} {summary.session_id}  {summary.messages:>4} messages  {shorten(summary.title, 60)}")
    screen.say("(* this session, c the one -c continues)" if current else "(c: the session -c continues)", style="dim")
    return 0


def show_session(
    store: SessionStoreExtension, screen: Screen, session_id: str, db: str, titles: SessionTitles | None = None
) -> int:
    titles = titles or SessionTitles(db)
    messages = store.messages(session_id)
    if not messages and (titles.runs is None or session_id not in titles.runs.sessions()):
        raise SessionsRefused(f"no session {session_id} in {db}")
    screen.say(f"session {session_id}: {len(messages)} messages", style="bold")
    if titles.runs is not None:
        screen.say(f"title: {titles.title(session_id, messages)}")
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


def delete_session(
    store: SessionStoreExtension, screen: Screen, session_id: str, db: str, titles: SessionTitles | None = None
) -> int:
    """Remove every row of a session: messages, waits and answers, Plan Mode, rows set aside, and in a run
    store its runs, their events and inbox, its title and owner (refused while a process runs it, or while a run
    of it has not ended)."""
    titles = titles or SessionTitles(db)
    known = session_id in store.sessions() or bool(store.pending_approvals(session_id))
    if not known and (titles.runs is None or session_id not in titles.runs.sessions()):
        raise SessionsRefused(f"no session {session_id} in {db}")
    try:
        lock = store.store.lock_session(session_id)
    except SessionCarried as carried:  # a run of the run store on the file owns it
        raise SessionsRefused(
            f"session {session_id} has a run that has not ended ({carried.request_id}, {carried.status}); not deleted"
        ) from None
    except SessionLocked:
        raise SessionsRefused(f"session {session_id} is running in another process; not deleted") from None
    try:
        if titles.runs is not None:
            _delete_runs(titles, session_id)
        store.store.delete_session(session_id)
    finally:
        lock.release()
    if last_session(store, db) is None and os.path.exists(_last_file(db)):
        os.remove(_last_file(db))
    screen.say(f"deleted session {session_id}")
    return 0


def _delete_runs(titles: SessionTitles, session_id: str) -> None:
    """Delete the session from the run store (its runs, events, inbox, history, title and owner); refused while
    a run of it is queued, running or parked."""
    assert titles.runs is not None
    unended = titles.runs.runs(session_id, active=True)
    if unended:
        run = unended[0]
        raise SessionsRefused(
            f"session {session_id} has a run that has not ended ({run.request_id}, {run.status}); not deleted"
        )
    try:
        titles.runs.delete_session(session_id, ended_only=True)
    except SessionBusy:  # a run started since the look above
        raise SessionsRefused(f"session {session_id} has a run that has not ended; not deleted") from None
    titles.forget(session_id)


def title_session(
    store: SessionStoreExtension,
    screen: Screen,
    session_id: str,
    db: str,
    text: str | None,
    titles: SessionTitles | None = None,
) -> int:
    """Show ``session_id``'s title, or set it to ``text``."""
    titles = titles or SessionTitles(db)
    messages = store.messages(session_id)
    if not messages and session_id not in _stored(store, titles):
        raise SessionsRefused(f"no session {session_id} in {db}")
    if text is not None and not titles.set(session_id, text):
        raise SessionsRefused(f"no session {session_id} in {db}")
    screen.say(titles.title(session_id, messages))
    return 0


def export_session(
    store: SessionStoreExtension,
    screen: Screen,
    session_id: str,
    db: str,
    path: str,
    titles: SessionTitles | None = None,
) -> int:
    """Write ``session_id`` to ``path``: an HTML page for .html/.htm, else Markdown."""
    from orchestrator.observe.export import to_html, to_markdown

    titles = titles or SessionTitles(db)
    if session_id not in store.sessions():
        raise SessionsRefused(f"no session {session_id}")
    messages = store.messages(session_id)
    heading = titles.title(session_id, messages) or session_id
    text = to_html(messages, heading) if path.lower().endswith((".html", ".htm")) else to_markdown(messages, heading)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise SessionsRefused(f"cannot write {path}: {error.strerror or error}") from None
    screen.say(f"exported {len(messages)} messages to {path}")
    return 0


def fork_stored(
    store: SessionStoreExtension,
    screen: Screen,
    session_id: str,
    db: str,
    target: str | None,
    turn: int | None,
    titles: SessionTitles | None = None,
) -> int:
    """Copy ``session_id`` (up to ``turn``) into ``target`` (default: a new id); the new id is printed. In a run
    store, the run store's fork (refused while a run of the session has not ended)."""
    from orchestrator.store.fork import ForkRefused

    titles = titles or SessionTitles(db)
    new = target or f"{session_id}-fork-{os.urandom(3).hex()}"
    try:
        copied = fork_into(store, titles, session_id, new, turn)
    except ForkRefused as refused:
        raise SessionsRefused(refused.reason) from None
    except SessionBusy:
        raise SessionsRefused(f"session {session_id} has a run that has not ended; not forked") from None
    titles.forked(session_id, new, store.messages(session_id))
    screen.say(f"forked {session_id} into {new} ({copied} messages)")
    return 0


def fork_into(store: SessionStoreExtension, titles: SessionTitles, source: str, target: str, turns: int | None) -> int:
    """Copy ``source`` (up to turn ``turns``) into the new session ``target`` (untitled: ``SessionTitles.forked``
    titles it); how many messages were copied. In a run store, the run store's fork (which copies a title it
    keeps): SessionBusy while a run of ``source`` has not ended. ForkRefused as ``fork_session`` refuses."""
    from orchestrator.store.fork import fork_session

    if titles.runs is not None:
        copied = titles.runs.fork(source, target, turns=turns)
    else:
        copied = fork_session(store.store, source, target, turns=turns)
    return copied

"""Session history: the messages a session keeps between requests, and reading them whatever store holds them.

An agent keeps a session's messages in its ``history`` (``InMemoryHistory`` by
default, or another ``SessionHistory``), or, without one, in a store extension
(one with ``sessions()`` and ``messages(session_id)``, like SQLiteSessionStore).
``session_messages`` and ``stored_session_ids`` read either; stores may block,
so they are read in a worker thread.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import trio

from orchestrator.messages import Message

T = TypeVar("T")


class SessionHistory(Protocol):
    """Where an Agent keeps each session's messages."""

    def load(self, session_id: str) -> list[Message]: ...

    def append(self, session_id: str, message: Message) -> None: ...

    def replace(self, session_id: str, messages: Sequence[Message]) -> None: ...


DEFAULT_MAX_SESSIONS = 10_000
"""How many sessions an ``InMemoryHistory`` keeps before it forgets the least recently used."""


class InMemoryHistory:
    """History kept in this process's memory (the default), for development and tests.

    It keeps at most ``max_sessions`` sessions: loading or appending to one makes it the most
    recently used, and a new session past the cap makes the history forget the least recently
    used one (a running request's session is used at each of its messages, so it is never the
    one forgotten). Nothing survives the process; keep sessions in a store in production.
    """

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"InMemoryHistory.max_sessions must be a whole number of at least 1, got {max_sessions!r}")
        self.max_sessions = max_sessions
        self._sessions: collections.OrderedDict[str, list[Message]] = collections.OrderedDict()

    def _used(self, session_id: str) -> list[Message]:
        messages = self._sessions.get(session_id)
        if messages is None:
            messages = self._sessions[session_id] = []
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        return messages

    def load(self, session_id: str) -> list[Message]:
        messages = self._sessions.get(session_id)
        if messages is None:
            return []
        self._sessions.move_to_end(session_id)
        return list(messages)

    def append(self, session_id: str, message: Message) -> None:
        self._used(session_id).append(message)

    def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        self._used(session_id)[:] = list(messages)

    def delete(self, session_id: str) -> bool:
        """Forget the session; whether it was kept."""
        return self._sessions.pop(session_id, None) is not None

    def sessions(self) -> list[str]:
        return list(self._sessions)


@runtime_checkable
class ListsSessions(Protocol):
    """A history or store that can name the sessions it holds."""

    def sessions(self) -> list[str]: ...


@runtime_checkable
class StoresMessages(Protocol):
    """A store extension that holds each session's messages."""

    def messages(self, session_id: str) -> list[Message]: ...


class SessionSource(Protocol):
    """What holds an agent's sessions: its history, its extensions, the sessions running now (an Agent)."""

    @property
    def history(self) -> SessionHistory | None: ...

    @property
    def extensions(self) -> Sequence[Any]: ...

    def running(self) -> list[str]: ...


async def _off_thread(function: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(function)


def session_store(source: SessionSource) -> Any:
    """The store extension that lists sessions and holds their messages, or None."""
    for extension in source.extensions:
        if isinstance(extension, ListsSessions) and isinstance(extension, StoresMessages):
            return extension
    return None


async def stored_session_ids(source: SessionSource) -> list[str]:
    """The sessions the history and the store extension know, without repeats."""
    found: list[str] = []
    if isinstance(source.history, ListsSessions):
        found.extend(source.history.sessions())
    store = session_store(source)
    if store is not None:
        found.extend(await _off_thread(store.sessions))
    return list(dict.fromkeys(found))


async def session_messages(source: SessionSource, session_id: str) -> list[Message] | None:
    """The session's stored messages, or None when no history or store knows the session."""
    history = source.history
    if history is not None:
        known = await stored_session_ids(source) if isinstance(history, ListsSessions) else None
        if known is not None and session_id not in known and session_id not in source.running():
            return None
        return list(await _off_thread(lambda: history.load(session_id)))
    store = session_store(source)
    if store is None:
        return None
    if session_id not in await _off_thread(store.sessions) and session_id not in source.running():
        return None
    messages: list[Message] = await _off_thread(lambda: store.messages(session_id))
    return messages

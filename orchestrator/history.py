"""Session history: the messages a session keeps between requests, and reading them whatever store holds them.

An agent keeps a session's messages in its ``history`` (``InMemoryHistory`` by
default, or another ``SessionHistory``), or, without one, in a store extension
(one with ``sessions()`` and ``messages(session_id)``, like SQLiteSessionStore).
``session_messages`` and ``stored_session_ids`` read either; stores may block,
so they are read in a worker thread.
"""

from __future__ import annotations

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


class InMemoryHistory:
    """History kept in this process's memory (the default)."""

    def __init__(self) -> None:
        self._sessions: dict[str, list[Message]] = {}

    def load(self, session_id: str) -> list[Message]:
        return list(self._sessions.get(session_id, ()))

    def append(self, session_id: str, message: Message) -> None:
        self._sessions.setdefault(session_id, []).append(message)

    def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        self._sessions[session_id] = list(messages)

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

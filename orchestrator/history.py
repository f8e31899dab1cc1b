"""Session history: the messages a session keeps between requests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from orchestrator.messages import Message


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

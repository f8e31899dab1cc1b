"""What the service can tell about sessions: stored ones, running ones, their history and mode.

History comes from the agent's ``history`` when it has one, otherwise from a
store extension (one with ``sessions()`` and ``messages(session_id)``, like
SQLiteSessionStore). Stores may block, so they are read in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import anyio.to_thread

from orchestrator.agent import Agent
from orchestrator.messages import Message

T = TypeVar("T")


@runtime_checkable
class _ListsSessions(Protocol):
    def sessions(self) -> list[str]: ...


@runtime_checkable
class _StoresMessages(Protocol):
    def messages(self, session_id: str) -> list[Message]: ...


async def _off_thread(function: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(function)


def _store(agent: Agent) -> Any:
    for extension in agent.extensions:
        if isinstance(extension, _ListsSessions) and isinstance(extension, _StoresMessages):
            return extension
    return None


async def stored_session_ids(agent: Agent) -> list[str]:
    found: list[str] = []
    if isinstance(agent.history, _ListsSessions):
        found.extend(agent.history.sessions())
    store = _store(agent)
    if store is not None:
        found.extend(await _off_thread(store.sessions))
    return list(dict.fromkeys(found))


async def history(agent: Agent, session_id: str) -> list[Message] | None:
    """The session's stored messages, or None when no store knows the session."""
    if agent.history is not None:
        known = await stored_session_ids(agent) if isinstance(agent.history, _ListsSessions) else None
        if known is not None and session_id not in known and session_id not in agent.running():
            return None
        return list(await _off_thread(lambda: agent.history.load(session_id)))  # type: ignore[union-attr]
    store = _store(agent)
    if store is None:
        return None
    if session_id not in await _off_thread(store.sessions) and session_id not in agent.running():
        return None
    messages: list[Message] = await _off_thread(lambda: store.messages(session_id))
    return messages


def plan_mode(agent: Agent, session_id: str) -> str | None:
    """The session's Plan Mode state when the agent has Plan Mode."""
    from orchestrator.extensions.plan_mode import PlanModeExtension

    for extension in agent.extensions:
        if isinstance(extension, PlanModeExtension):
            return extension.mode(session_id)
    return None

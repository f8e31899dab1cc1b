"""What the service can tell about sessions: stored ones, running ones, their history and mode.

History comes from the agent's ``history`` when it has one, otherwise from a
store extension (see ``orchestrator.history.session_messages``).
"""

from __future__ import annotations

from orchestrator.agent import Agent
from orchestrator.history import session_messages, stored_session_ids
from orchestrator.messages import Message

__all__ = ["history", "plan_mode", "stored_session_ids"]


async def history(agent: Agent, session_id: str) -> list[Message] | None:
    """The session's stored messages, or None when no store knows the session."""
    return await session_messages(agent, session_id)


def plan_mode(agent: Agent, session_id: str) -> str | None:
    """The session's Plan Mode state when the agent has Plan Mode."""
    from orchestrator.extensions.plan_mode import PlanModeExtension

    for extension in agent.extensions:
        if isinstance(extension, PlanModeExtension):
            return extension.mode(session_id)
    return None

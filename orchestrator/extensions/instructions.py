"""Adding request-scoped system instructions after the ones already at the head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.messages import SystemMessage

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext


def add_instructions(context: AgentRunContext, message: SystemMessage) -> None:
    """Insert ``message`` after the leading system messages (the agent's system prompt stays first).

    The message belongs to this request only: session history never stores system messages.
    """
    messages = context.messages
    head = 0
    while head < len(messages) and isinstance(messages[head], SystemMessage):
        head += 1
    context.add_message(message, index=head)

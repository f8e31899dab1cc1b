"""The protocol of a turn compactor such as CompactionExtension.

Each turn the runtime assembles the model request, then asks every registered
compactor whether it shortened the context; when one did, the session's stored
history is replaced by the compacted messages and the request is assembled
again, before ``before_model`` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext


@runtime_checkable
class TurnCompactor(Protocol):
    async def compact_turn(self, context: AgentRunContext) -> bool:
        """Compact ``context`` if needed; whether its messages were replaced."""
        ...

"""The names of the tools the terminal's agent has offered its model, for ``/permissions`` to check names against."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.extensions.base import AgentExtension
from orchestrator.model import ModelRequest

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext


class OfferedTools(AgentExtension):
    """Collects the name of every tool offered in a model request of this process (empty before the first)."""

    priority = 1000  # after the extensions that change a request's tools

    def __init__(self) -> None:
        self.names: set[str] = set()

    async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
        self.names.update(tool.name for tool in request.tools)

"""Extensions that hook into the request lifecycle."""

from orchestrator.extensions.base import AgentExtension

__all__ = ["AgentExtension"]

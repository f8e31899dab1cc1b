"""Extensions that hook into the request lifecycle.

The concrete extensions live in their own modules (``plan_mode``, ``steering``,
``ask_user``, ``filesystem``, ``bash``, ``agents_md``, ``skills``, ``mcp``, ...) and are
imported from there.
"""

from orchestrator.extensions.base import AgentExtension

__all__ = ["AgentExtension"]

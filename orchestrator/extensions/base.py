"""AgentExtension: the hooks an extension may implement, all optional.

The hook contract is the request runtime's interface, so it is defined beside the runtime that
calls it (``orchestrator.runtime.hooks``); this is its public name.
"""

from orchestrator.runtime.hooks import HOOK_NAMES, AgentExtension, CallNextModel, CallNextTool, overrides

__all__ = ["HOOK_NAMES", "AgentExtension", "CallNextModel", "CallNextTool", "overrides"]

"""Typed errors raised by the runtime."""

from __future__ import annotations

from machines.build import GuardRefused, IllegalTransition

__all__ = [
    "AgentError",
    "GuardRefused",
    "GuardrailTripped",
    "IllegalTransition",
    "InputGuardrailTripped",
    "MaxIterationsExceeded",
    "ModelError",
    "OutputGuardrailTripped",
    "SessionBusy",
    "ToolArgumentsError",
    "ToolRejected",
    "ValueMismatch",
]


class AgentError(Exception):
    """Base class of the runtime's own errors."""


class MaxIterationsExceeded(AgentError):
    """The request used all model calls allowed for one input."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request reached max_iterations={limit} without a final answer")
        self.limit = limit


class GuardrailTripped(AgentError):
    """A guardrail's tripwire ended the request: ``guardrail`` names it, ``reason`` and ``info`` are what it said."""

    stage: str = "input"

    def __init__(self, guardrail: str, reason: str, info: object = None) -> None:
        said = f": {reason}" if reason else ""
        super().__init__(f"{self.stage} guardrail {guardrail!r} tripped{said}")
        self.guardrail = guardrail
        self.reason = reason
        self.info = info


class InputGuardrailTripped(GuardrailTripped):
    """An input guardrail refused the user's input; no model call was made for it."""

    stage = "input"


class OutputGuardrailTripped(GuardrailTripped):
    """An output guardrail refused the final answer; the request failed instead of answering."""

    stage = "output"


class ModelError(AgentError):
    """The model stream broke its contract (for example, no completed response)."""


class SessionBusy(AgentError):
    """A request of this session is already running."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already has a running request")
        self.session_id = session_id


class ToolRejected(AgentError):
    """Raised by a hook to refuse a tool call; the model sees a failed result."""


class ToolArgumentsError(AgentError):
    """Tool arguments do not match the tool's schema; ``field`` names the argument at fault when one is."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ValueMismatch(AgentError):
    """A JSON value does not fit the type or JSON Schema it must have.

    ``path`` names the field at fault (``order.items[1].quantity``; empty for the whole value)
    and ``reason`` says why it does not fit.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason

"""AgentExtension: the hooks an extension may implement, all optional (public as ``orchestrator.extensions.base``).

The runtime calls each hook by its name (``HOOK_NAMES``) with the request's context first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Verdict
from orchestrator.events import AgentEvent
from orchestrator.messages import AssistantMessage, ToolCall, UserMessage
from orchestrator.model import ModelEvent, ModelRequest
from orchestrator.tools import ToolResult

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

CallNextModel = Callable[[ModelRequest], AsyncIterator[ModelEvent]]
CallNextTool = Callable[[ToolCall], Awaitable[ToolResult]]


class AgentExtension:
    """Base class of extensions. Override only the hooks you need.

    ``priority`` orders extensions (lower first; ties keep registration order).
    """

    priority: int = 0

    hook_loop: str = "auto"
    """Where this extension's ``async def`` hooks run in a request that has an application's asyncio loop.

    ``"asyncio"``: on that loop; ``"trio"``: on the request's trio loop; ``"auto"`` (the default): on that
    loop when the hook is defined outside the ``orchestrator`` package. A hook marked with
    ``orchestrator.tools.loops.runs_on`` chooses for itself. ``on_tool_call`` and ``on_model_request``
    (which take ``call_next``) always run on trio; so does everything in a request without such a loop.
    """

    event_names: frozenset[str] | None = None
    """Names of the events ``on_event`` receives; None (the default) for every event.

    An extension that only listens for a few kinds of events names them here, so
    a request nobody else listens to does not build the rest.
    """

    fingerprinted: bool = True
    """Whether the agent's fingerprint names this extension (False: machinery of where the agent runs)."""

    def fingerprint_settings(self) -> Any:
        """The settings that make this extension behave as it does, as JSON data, for the agent's fingerprint
        (None: none exposed; callables are named by their qualified names)."""
        return None

    @property
    def name(self) -> str:
        """Unique registration identity, defaulting to the concrete class name."""
        assigned: str | None = self.__dict__.get("_extension_name")
        return assigned if assigned is not None else type(self).__name__

    @name.setter
    def name(self, value: str) -> None:
        self.__dict__["_extension_name"] = value

    @property
    def pending(self) -> bool:
        """Whether this extension takes part in at least one running request."""
        count: int = self.__dict__.get("_active_requests", 0)
        return count > 0

    def _enter_request(self) -> None:
        self.__dict__["_active_requests"] = self.__dict__.get("_active_requests", 0) + 1

    def _leave_request(self) -> None:
        self.__dict__["_active_requests"] = self.__dict__.get("_active_requests", 0) - 1

    async def on_tool(self, context: AgentRunContext) -> None:
        """Register local or provider-hosted tools (all extensions, before on_state)."""

    async def on_state(self, context: AgentRunContext) -> None:
        """Restore history and initialize state before input conversion."""

    async def on_message(self, context: AgentRunContext) -> None:
        """Transform ``context.input_message`` before it is appended."""

    async def before_run(self, context: AgentRunContext) -> None:
        """Run after the input message is appended and published."""

    async def check_input(self, context: AgentRunContext, message: UserMessage) -> None:
        """Check the user's input before the first model call; raise ``InputGuardrailTripped`` to refuse it."""

    async def check_output(self, context: AgentRunContext, answer: AssistantMessage) -> None:
        """Check the final answer before it is given; raise ``OutputGuardrailTripped`` to refuse it."""

    async def before_turn(self, context: AgentRunContext) -> None:
        """Run before this turn's model request is assembled."""

    async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
        """Inspect the assembled request; edit context to change it (``context.model_settings`` for its settings)."""

    async def on_model_request(
        self, context: AgentRunContext, request: ModelRequest, call_next: CallNextModel
    ) -> AsyncIterator[ModelEvent]:
        """Wrap one provider call; the default passes events through and closes the stream."""
        stream = call_next(request)
        try:
            async for event in stream:
                yield event
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()

    async def after_model(self, context: AgentRunContext, response: AssistantMessage) -> None:
        """Run after the complete assistant message is appended."""

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        """Run before one tool call; raise ToolRejected to refuse it."""

    async def on_tool_call(self, context: AgentRunContext, call: ToolCall, call_next: CallNextTool) -> ToolResult:
        """Wrap one local tool handler and return its ToolResult."""
        return await call_next(call)

    async def after_tool(
        self,
        context: AgentRunContext,
        call: ToolCall,
        result: ToolResult,
        error: BaseException | None,
    ) -> None:
        """Inspect or modify a tool result before it is appended."""

    async def after_turn(self, context: AgentRunContext, result: AssistantMessage) -> None:
        """Run once the turn's assistant message and tool results are settled."""

    async def after_run(self, context: AgentRunContext, result: AssistantMessage) -> None:
        """Run after a successful final answer."""

    async def on_success(self, context: AgentRunContext, result: AssistantMessage) -> None:
        """Run once after every after_run hook succeeded, before run_completed."""

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        """Run before an error is propagated to the caller."""

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        """Receive every event emitted or published in a request."""

    async def on_compact(self, context: AgentRunContext) -> None:
        """Summarize restored context during ``Agent.compact``."""

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Verdict:
        """Take an external event (True), ignore it (False), or decline it with a ``Refusal`` saying why.

        May be called from any thread. Override this (rather than ``accept``) to
        give reasons; the default answers what ``accept`` says.
        """
        return self.accept(config, event)

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        """Claim an external event (may be called from any thread).

        The older form of ``consider``: an extension that overrides ``consider``
        gets an ``accept`` that is true exactly when ``consider`` took the event.
        """
        if type(self).consider is not AgentExtension.consider:
            return self.consider(config, event) is True
        return False


HOOK_NAMES: tuple[str, ...] = (
    "on_tool",
    "on_state",
    "on_message",
    "before_run",
    "check_input",
    "check_output",
    "before_turn",
    "before_model",
    "on_model_request",
    "after_model",
    "before_tool",
    "on_tool_call",
    "after_tool",
    "after_turn",
    "after_run",
    "on_success",
    "on_error",
    "on_event",
    "on_compact",
)


def overrides(extension: AgentExtension, hook: str) -> bool:
    """Whether ``extension`` replaces the base implementation of ``hook`` (an instance's None: it does not)."""
    if hook in extension.__dict__:
        return extension.__dict__[hook] is not None
    base: Any = getattr(AgentExtension, hook)
    mine: Any = getattr(type(extension), hook, base)
    return mine is not base

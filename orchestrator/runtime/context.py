"""AgentRunContext: what hooks see and change during one request.

The context reads its request through ``ContextRun`` and gives hooks the request's agent as
an ``AgentView``: the two protocols below state all it needs, so this module imports neither
the request (``orchestrator.runtime.run``) nor the ``Agent`` class.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from machines.build import BoundMachine
from orchestrator.config import AgentRunConfig
from orchestrator.errors import AgentError
from orchestrator.events import AgentEvent
from orchestrator.history import SessionHistory
from orchestrator.limits import RunUsage
from orchestrator.messages import Message, SystemMessage, ToolCall, UserMessage, clean_message
from orchestrator.model import DEFAULT_SETTINGS, Model, ModelSettings, Usage
from orchestrator.runtime.budget import Budget
from orchestrator.tools import ServerToolDefinition, ToolDefinition


class WaitBoard(Protocol):
    """The agent's board of live waits (``orchestrator.runtime.pending.WaitingCalls``), as a waiting call joins it
    and leaves it."""

    def add(self, wait: Any) -> None: ...

    def discard(self, wait: Any) -> None: ...


class AgentView(Protocol):
    """What hooks read of the agent that runs a request (``context.agent``)."""

    @property
    def model(self) -> Model: ...

    @property
    def tools(self) -> Sequence[ToolDefinition]: ...

    @property
    def extensions(self) -> Sequence[object]: ...

    @property
    def history(self) -> SessionHistory | None: ...

    @property
    def system_prompt(self) -> str | None: ...

    @property
    def max_iterations(self) -> int: ...

    @property
    def waiting(self) -> WaitBoard: ...


class ContextRun(Protocol):
    """What a context reads and asks of its request."""

    @property
    def agent(self) -> AgentView: ...

    @property
    def machine(self) -> BoundMachine: ...

    @property
    def capabilities(self) -> frozenset[str] | None: ...

    @property
    def plan_mode_active(self) -> bool: ...

    @property
    def streams(self) -> bool: ...

    @property
    def budget(self) -> Budget | None: ...

    async def emit(self, event: AgentEvent) -> None: ...

    async def forward(self, event: AgentEvent) -> None: ...

    async def publish(self, event: AgentEvent, *, to_publisher: bool = False) -> None: ...

    def queue_internal(self, message: UserMessage | SystemMessage) -> None: ...

    def asked_before(self, tool_call_id: str) -> bool: ...

    def expiry_before(self, tool_call_id: str) -> float | None: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    async def enter_plan_mode(self, capabilities: frozenset[str]) -> None: ...

    async def exit_plan_mode(self) -> None: ...


def idempotency_key(session_id: str, request_id: str, call_id: str) -> str:
    """The stable idempotency key of one tool call (see ``AgentRunContext.idempotency_key``)."""
    import hashlib  # on first use

    digest = hashlib.sha256("\0".join((session_id, request_id, call_id)).encode("utf-8", "surrogatepass"))
    return "call-" + digest.hexdigest()[:40]


class AgentRunContext:
    """Request-scoped view of messages, tools, state and events.

    The context refers to its request weakly (the request holds the context), so
    a finished request is freed by reference counting, without a garbage
    collection. Its messages, tools and state stay readable as long as the
    context is kept; what needs the request itself (emit, states, plan mode)
    raises AgentError once nothing else keeps the request.
    """

    def __init__(
        self, run: ContextRun, config: AgentRunConfig, request_id: str, input_message: UserMessage | None
    ) -> None:
        self._request = weakref.ref(run)
        self.config = config
        self.session_id = config.session_id
        self.request_id = request_id
        self.input_message = input_message
        #: The application's per-run object (a user, a database pool, a client), given with the request or made
        #: by the agent's ``deps_factory`` from ``metadata``; None when neither gives one.
        self.deps: Any = None
        self._approvals: dict[str, dict[str, Any]] | None = None  # made on first use: see ``approvals``
        self.tools: dict[str, ToolDefinition] = {}
        # Made on first use (most requests use neither): see the properties below.
        self._server_tools: list[ServerToolDefinition] | None = None
        self._state: dict[str, Any] | None = None
        self._messages: list[Message] = []
        self._model_settings = DEFAULT_SETTINGS

    @property
    def approvals(self) -> dict[str, dict[str, Any]]:
        """Approval records of this request's calls, by call id, set in ``before_tool``: the call's ToolMessage
        carries its record (``approval``), and a record's ``arguments`` are the ones the call runs with."""
        if self._approvals is None:
            self._approvals = {}
        return self._approvals

    def approval_of(self, call_id: str) -> dict[str, Any] | None:
        """The approval record of ``call_id`` (None when it has none); makes no record table."""
        return self._approvals.get(call_id) if self._approvals else None

    def take_approval(self, call_id: str) -> dict[str, Any] | None:
        """The approval record of ``call_id``, removed (None when it has none); makes no record table."""
        return self._approvals.pop(call_id, None) if self._approvals else None

    @property
    def model_settings(self) -> ModelSettings:
        """The settings of this request's next model call: the agent's, with the run's in their place.

        A ``before_model`` hook may assign new ones (``attrs.evolve(context.model_settings, ...)``):
        they hold for the rest of the request.
        """
        return self._model_settings

    @model_settings.setter
    def model_settings(self, settings: ModelSettings) -> None:
        if not isinstance(settings, ModelSettings):
            raise TypeError(f"context.model_settings must be a ModelSettings, got {type(settings).__name__}")
        self._model_settings = settings

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The request's JSON metadata (``AgentRunConfig.metadata``): stored with a durable run, sent in run_started."""
        return self.config.metadata

    def idempotency_key(self, call: ToolCall | str) -> str:
        """A key for ``call`` (or its id) that is the same every time this call of this request runs, resumes included.

        It is ``"call-"`` and 40 hex digits of the SHA-256 of the session id, the request id and the call id; pass it
        to an external API's idempotency key so that a call run again after a resume takes effect once.
        """
        return idempotency_key(self.session_id, self.request_id, call if isinstance(call, str) else call.id)

    @property
    def server_tools(self) -> list[ServerToolDefinition]:
        """Provider-side tools offered in this request (a list hooks may change in place)."""
        if self._server_tools is None:
            self._server_tools = []
        return self._server_tools

    @server_tools.setter
    def server_tools(self, tools: list[ServerToolDefinition]) -> None:
        self._server_tools = tools

    @property
    def state(self) -> dict[str, Any]:
        """Request-scoped values extensions keep between hooks."""
        if self._state is None:
            self._state = {}
        return self._state

    @state.setter
    def state(self, state: dict[str, Any]) -> None:
        self._state = state

    @property
    def _run(self) -> ContextRun:
        run = self._request()
        if run is None:
            raise AgentError(f"request {self.request_id} has ended and is no longer kept")
        return run

    @property
    def agent(self) -> AgentView:
        """The agent running this request (its model, tools, extensions, history and settings)."""
        return self._run.agent

    @property
    def usage(self) -> RunUsage | None:
        """What this request spent so far, when it counts (it has usage limits); else None."""
        budget = self._run.budget
        return budget.report() if budget is not None else None

    def record_subagent_usage(self, usage: Usage) -> None:
        """Add what a subagent of this request spent: reported apart, counted only with ``count_subagents``."""
        budget = self._run.budget
        if budget is not None:
            budget.record_subagent(usage)

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages the next model request will see."""
        return tuple(self._messages)

    def add_message(self, message: Message, index: int | None = None) -> None:
        """Insert a request-scoped message (appended when ``index`` is None), its text made encodable as UTF-8."""
        message = clean_message(message)
        if index is None:
            self._messages.append(message)
        else:
            self._messages.insert(index, message)

    def replace_messages(self, messages: Sequence[Message]) -> None:
        """Replace every message the next model request will see (their text made encodable as UTF-8)."""
        self._messages = [clean_message(message) for message in messages]

    def register_tool(self, definition: ToolDefinition) -> None:
        """Offer a local tool in this request; a different tool of the same name is an error."""
        existing = self.tools.get(definition.name)
        if existing is not None and existing is not definition:
            raise ValueError(f"tool {definition.name!r} is registered twice")
        self.tools[definition.name] = definition

    def unregister_tool(self, name: str) -> None:
        self.tools.pop(name, None)

    def register_server_tool(self, definition: ServerToolDefinition) -> None:
        self.server_tools.append(definition)

    async def emit(self, event: AgentEvent) -> None:
        """Stream ``event`` to the consumer and deliver it to every on_event."""
        await self._run.emit(event)

    async def forward(self, event: AgentEvent) -> None:
        """Stream another request's event (a subagent's) to this request's consumer, keeping its ids.

        It takes this request's next ``seq``; no on_event sees it (it is not this
        request's event). Nothing happens when this request streams to no one.
        """
        await self._run.forward(event)

    @property
    def streams(self) -> bool:
        """Whether this request's events reach a consumer (a stream or a run's log)."""
        return self._run.streams

    async def publish(self, event: AgentEvent) -> None:
        """Deliver ``event`` to every extension's on_event (not streamed).

        A subscriber's error reaches the caller, also once the request is ending.
        """
        await self._run.publish(event, to_publisher=True)

    def queue_internal_message(self, message: UserMessage | SystemMessage) -> None:
        """Queue a continuation answered after the current input (and any steering).

        Raises AgentError once the request is concluding and can no longer answer it.
        """
        self._run.queue_internal(message)

    @asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Hold the request in awaiting_approval for the body's duration."""
        await self._run.pause()
        try:
            yield
        finally:
            await self._run.resume()

    @property
    def states(self) -> dict[str, str]:
        """Current state of each region of the request machine."""
        return self._run.machine.states

    @property
    def plan_mode_active(self) -> bool:
        return self._run.plan_mode_active

    @property
    def capabilities(self) -> frozenset[str] | None:
        """Tool names allowed while plan mode is active (None outside it)."""
        return self._run.capabilities

    async def enter_plan_mode(self, capabilities: Iterable[str]) -> None:
        """Restrict execution and offered tools to ``capabilities``."""
        await self._run.enter_plan_mode(frozenset(capabilities))

    async def exit_plan_mode(self) -> None:
        """Lift the plan-mode restriction."""
        await self._run.exit_plan_mode()

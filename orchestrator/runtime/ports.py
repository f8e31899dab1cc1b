"""What the request runtime needs of an agent, of its extensions and of a request, stated as protocols.

The runtime's modules depend on these, not on the ``Agent`` class (``orchestrator.agent``
satisfies ``AgentPort`` and ``RunOpener``) nor on ``RequestRun`` (which satisfies ``RunPort``):
the agent composes the runtime and the extensions, and nothing in the runtime imports them back.
The hooks an extension implements are the runtime's too: ``orchestrator.runtime.hooks``.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Protocol

import trio

from machines.build import BoundMachine, Step
from orchestrator.config import AgentRunConfig
from orchestrator.errors import ValueMismatch
from orchestrator.events import AgentEvent
from orchestrator.limits import UsageLimits
from orchestrator.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
)
from orchestrator.model import ModelRequest, ModelSettings, StopReason, Usage
from orchestrator.output import OutputType
from orchestrator.runtime.app_loop import AppLoop
from orchestrator.runtime.budget import Budget
from orchestrator.runtime.compactor import TurnCompactor
from orchestrator.runtime.context import AgentRunContext, AgentView
from orchestrator.runtime.fingerprint import AgentFingerprint, OnAgentChanged
from orchestrator.runtime.hooks import AgentExtension
from orchestrator.runtime.inbox import InputInbox
from orchestrator.runtime.pending import WaitingCalls
from orchestrator.runtime.restored import Restored
from orchestrator.runtime.sinks import EventSink
from orchestrator.tool_content import ToolResultContent

__all__ = ["AgentPort", "RunOpener", "RunPort"]


class AgentPort(AgentView, Protocol):
    """What a request reads of the agent that runs it."""

    @property
    def extensions(self) -> Sequence[AgentExtension]: ...

    @property
    def hooks(self) -> Mapping[str, Sequence[AgentExtension]]: ...

    @property
    def compactors(self) -> Sequence[TurnCompactor]: ...

    @property
    def inboxes(self) -> Sequence[InputInbox]: ...

    @property
    def waiting(self) -> WaitingCalls: ...

    @property
    def usage_limits(self) -> UsageLimits | None: ...

    @property
    def tool_timeout(self) -> float | None: ...

    @property
    def model_calls(self) -> trio.CapacityLimiter | None: ...

    @property
    def run_slots(self) -> trio.CapacityLimiter | None: ...

    @property
    def model_settings(self) -> ModelSettings: ...

    @property
    def output_type(self) -> OutputType | None: ...

    @property
    def fingerprint(self) -> AgentFingerprint: ...

    @property
    def on_agent_changed(self) -> OnAgentChanged: ...


class RunPort(Protocol):
    """What a request's parts (its edges, its tool runner, its handle and stream) use of the request."""

    iterations: int
    approvals: int
    capabilities: frozenset[str] | None
    request: ModelRequest | None
    response: AssistantMessage | None
    usage: Usage | None
    stop_reason: StopReason
    raw_stop_reason: str | None
    open_calls: dict[str, ToolCall]
    steering: UserMessage | None
    skipped_ids: tuple[str, ...]
    internal: UserMessage | SystemMessage | None
    internal_refused: bool
    error: BaseException | None
    restored: Restored | None
    abandoned: bool
    budget: Budget | None
    output_spec: OutputType | None
    output: Any
    output_error: ValueMismatch | None
    output_attempts: int
    held_text: str | None
    app_loop: AppLoop | None

    @property
    def agent(self) -> AgentPort: ...

    @property
    def context(self) -> AgentRunContext: ...

    @property
    def hooks(self) -> Mapping[str, Sequence[AgentExtension]]: ...

    @property
    def machine(self) -> BoundMachine: ...

    @property
    def cut_off(self) -> bool: ...

    def run(self) -> Coroutine[Any, Any, AssistantMessage]: ...

    def mark_left(self) -> None: ...

    async def append(self, message: Message, *, cleaned: bool = False) -> Message: ...

    def assemble(self) -> ModelRequest: ...

    async def settle(self, call: ToolCall, status: ToolStatus, content: ToolResultContent) -> ToolMessage: ...

    async def settle_in_order(
        self, call: ToolCall, status: ToolStatus, content: ToolResultContent, order: tuple[str, ...]
    ) -> None: ...

    async def _announce(self, step: Step) -> None: ...

    async def _announce_steering(self) -> None: ...

    def _open_inboxes(self) -> None: ...

    def _close_inboxes(self) -> None: ...

    async def _poll(self) -> None: ...

    async def _emit(self, kind: type[AgentEvent], *values: Any) -> None: ...

    async def _emit_new(self, kind: type[AgentEvent], **fields: Any) -> None: ...

    async def _run_hook(self, name: str, *args: Any) -> None: ...

    async def _store_history(self) -> None: ...


class RunOpener(Protocol):
    """An agent as the runtime's handles and streams start requests on it."""

    async def _open_run(
        self,
        config: AgentRunConfig,
        message: UserMessage | None,
        sink: EventSink | None,
        restored: Restored | None = None,
        deps: Any = None,
    ) -> RunPort: ...

    def _close_run(self, run: RunPort) -> None: ...

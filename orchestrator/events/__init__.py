"""Events a request streams to its consumer and publishes to extensions.

Every event has ``name``, ``payload``, ``session_id``, ``request_id``, ``seq``
and ``ts``. The runtime fills the ids when an event is emitted inside a request,
and numbers every event the request streams: ``seq`` counts from 1 per request
without gaps, ``ts`` is ``time.time()`` when it was emitted. Events only
published to extensions keep ``seq == 0``.

The base classes are ``orchestrator.events.base``; the events of optional features
(``FEATURE_EVENTS``) are declared in ``orchestrator.events.features`` and built the first
time one of their names is asked for here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from orchestrator.events.base import AgentEvent, ExtensionEvent
from orchestrator.messages import AssistantMessage, Message, ToolCall, ToolMessage
from orchestrator.model import StopReason, Usage, implied_stop_reason

if TYPE_CHECKING:  # built on first use, see __getattr__ below
    from orchestrator.events.features import (
        AgentChangedEvent,
        CompactionCompletedEvent,
        CompactionStartedEvent,
        HistoryReplacedEvent,
        MCPServerFailedEvent,
        MCPServerStartedEvent,
        RunParkedEvent,
        RunResumedEvent,
        SteeringAcceptedEvent,
        SteeringAppliedEvent,
        SubagentCompletedEvent,
        SubagentStartedEvent,
        UsageLimitReachedEvent,
        WaitExpiredEvent,
    )

__all__ = [
    "AgentChangedEvent",
    "AgentEvent",
    "CompactionCompletedEvent",
    "CompactionStartedEvent",
    "ExtensionEvent",
    "HistoryReplacedEvent",
    "MCPServerFailedEvent",
    "MCPServerStartedEvent",
    "MessageAppendedEvent",
    "ModelCompletedEvent",
    "ModelStartedEvent",
    "ReasoningDeltaEvent",
    "RunCancelledEvent",
    "RunCompletedEvent",
    "RunFailedEvent",
    "RunParkedEvent",
    "RunResumedEvent",
    "RunStartedEvent",
    "SteeringAcceptedEvent",
    "SteeringAppliedEvent",
    "SubagentCompletedEvent",
    "SubagentStartedEvent",
    "TextDeltaEvent",
    "ToolCancelledEvent",
    "ToolCompletedEvent",
    "ToolFailedEvent",
    "ToolSkippedEvent",
    "ToolStartedEvent",
    "TransitionEvent",
    "UsageLimitReachedEvent",
    "WaitExpiredEvent",
]

@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class RunStartedEvent(AgentEvent):
    """The request started with this input; ``metadata`` is its ``AgentRunConfig.metadata``."""

    kind: ClassVar[str] = "run_started"
    input: Message
    metadata: Mapping[str, Any] = attrs.field(factory=dict, hash=False)


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class TransitionEvent(AgentEvent):
    """The request (or another machine) took an edge."""

    kind: ClassVar[str] = "transition"
    machine: str
    region: str
    source: str
    trigger: str
    dest: str


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ModelStartedEvent(AgentEvent):
    """A model call began (``iteration`` counts calls since the last input)."""

    kind: ClassVar[str] = "model_started"
    iteration: int


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class TextDeltaEvent(AgentEvent):
    """A piece of the model's streamed text."""

    kind: ClassVar[str] = "text_delta"
    text: str


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ReasoningDeltaEvent(AgentEvent):
    """A piece of the model's streamed reasoning (thinking) text."""

    kind: ClassVar[str] = "reasoning_delta"
    text: str


def _implied_stop_reason(event: ModelCompletedEvent) -> StopReason:
    return implied_stop_reason(event.message)


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ModelCompletedEvent(AgentEvent):
    """The model's complete response, why it ended, and token usage when the provider reported it.

    ``stop_reason`` is the normalised reason (``end_turn``, ``tool_use``,
    ``max_tokens``, ``content_filter``, ``refusal``, ``other``);
    ``raw_stop_reason`` the provider's own value, when it gave one.
    """

    kind: ClassVar[str] = "model_completed"
    message: AssistantMessage
    usage: Usage | None = None  # token counts, when the provider reported them
    stop_reason: StopReason = attrs.field(default=attrs.Factory(_implied_stop_reason, takes_self=True))
    raw_stop_reason: str | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ToolStartedEvent(AgentEvent):
    """A tool call is about to run."""

    kind: ClassVar[str] = "tool_started"
    call: ToolCall


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ToolCompletedEvent(AgentEvent):
    """A tool call succeeded; ``result`` is what the model reads."""

    kind: ClassVar[str] = "tool_completed"
    call: ToolCall
    result: ToolMessage


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ToolFailedEvent(AgentEvent):
    """A tool call failed (raised, was rejected, or had invalid arguments); the model reads why."""

    kind: ClassVar[str] = "tool_failed"
    call: ToolCall
    result: ToolMessage


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ToolSkippedEvent(AgentEvent):
    """A tool call did not run because steering replaced the rest of its turn."""

    kind: ClassVar[str] = "tool_skipped"
    call: ToolCall
    result: ToolMessage


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ToolCancelledEvent(AgentEvent):
    """A tool call was cut short or never finished because the request was cancelled or failed."""

    kind: ClassVar[str] = "tool_cancelled"
    call: ToolCall
    result: ToolMessage


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class MessageAppendedEvent(AgentEvent):
    """Published to extensions (not streamed) whenever history grows."""

    kind: ClassVar[str] = "message_appended"
    message: Message
    index: int


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class RunCompletedEvent(AgentEvent):
    """The request ended with this final answer."""

    kind: ClassVar[str] = "run_completed"
    result: AssistantMessage


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class RunFailedEvent(AgentEvent):
    """The request ended with this error."""

    kind: ClassVar[str] = "run_failed"
    error: BaseException


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class RunCancelledEvent(AgentEvent):
    """The request was cancelled."""

    kind: ClassVar[str] = "run_cancelled"


#: The events of optional features, declared in ``orchestrator.events.features`` and built on first use.
FEATURE_EVENTS = frozenset(
    {
        "AgentChangedEvent",
        "CompactionCompletedEvent",
        "CompactionStartedEvent",
        "HistoryReplacedEvent",
        "MCPServerFailedEvent",
        "MCPServerStartedEvent",
        "RunParkedEvent",
        "RunResumedEvent",
        "SteeringAcceptedEvent",
        "SteeringAppliedEvent",
        "SubagentCompletedEvent",
        "SubagentStartedEvent",
        "UsageLimitReachedEvent",
        "WaitExpiredEvent",
    }
)


def __getattr__(name: str) -> object:
    """An event of ``FEATURE_EVENTS``, loading ``orchestrator.events.features`` the first time one is asked for."""
    if name not in FEATURE_EVENTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from orchestrator.events import features

    value = getattr(features, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *FEATURE_EVENTS})

"""Events of the optional features: compaction, steering, parked runs, MCP servers and sub-agents.

Import them from ``orchestrator.events``, like every event: that module builds
this one the first time one of these names is asked for, so that ``import
orchestrator`` does not build classes a request uses only with these features.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

from orchestrator.events.base import AgentEvent
from orchestrator.messages import Message, UserMessage


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class HistoryReplacedEvent(AgentEvent):
    """Published to extensions (not streamed) when compaction replaced the session's history."""

    kind: ClassVar[str] = "history_replaced"
    messages: tuple[Message, ...]


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class RunParkedEvent(AgentEvent):
    """The run waits for an answer in a run store; no worker holds it until one arrives."""

    kind: ClassVar[str] = "run_parked"
    waiting: tuple[str, ...]  # ids of the calls that wait for an answer


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class RunResumedEvent(AgentEvent):
    """A worker took the run up again from its checkpoint."""

    kind: ClassVar[str] = "run_resumed"
    worker: str
    phase: str  # where the run picked up: awaiting_tool, answered or turn_settled


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class AgentChangedEvent(AgentEvent):
    """A resumed run's agent is not the one that started it: what changed, the agent's ``on_agent_changed``
    policy (``warn``, ``refuse`` or ``hook``) and its ``outcome`` (``continued``, or ``refused`` with a reason)."""

    kind: ClassVar[str] = "agent_changed"
    stored_digest: str
    current_digest: str
    tools_added: tuple[str, ...] = ()
    tools_removed: tuple[str, ...] = ()
    tools_changed: tuple[str, ...] = ()
    extensions_added: tuple[str, ...] = ()
    extensions_removed: tuple[str, ...] = ()
    extensions_changed: tuple[str, ...] = ()
    model_before: str | None = None
    model_after: str | None = None
    policy: Literal["warn", "refuse", "hook"] = "warn"
    outcome: Literal["continued", "refused"] = "continued"
    reason: str | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class SteeringAcceptedEvent(AgentEvent):
    """The request's steering inbox took a message; ``source`` says whether it came from outside or an extension."""

    kind: ClassVar[str] = "steering_accepted"
    message: UserMessage
    source: Literal["external", "extension"]


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class SteeringAppliedEvent(AgentEvent):
    """A steering message replaced the continuation of model call ``iteration``; its unrun calls were skipped."""

    kind: ClassVar[str] = "steering_applied"
    message: UserMessage
    skipped_call_ids: tuple[str, ...] = ()
    iteration: int = 0


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class CompactionStartedEvent(AgentEvent):
    """A compaction pass is summarising the context (estimated tokens before it)."""

    kind: ClassVar[str] = "compaction_started"
    tokens_before: int


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class CompactionCompletedEvent(AgentEvent):
    """A compaction pass ended: estimated tokens before and after, and how many messages the summary replaced."""

    kind: ClassVar[str] = "compaction_completed"
    tokens_before: int
    tokens_after: int
    messages_replaced: int


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class MCPServerStartedEvent(AgentEvent):
    """An MCP server answered its handshake; ``tools`` are the names its tools are offered under.

    Streamed by the request that started (or restarted) it; ``restarts`` counts
    the restarts before this start (0 for the first).
    """

    kind: ClassVar[str] = "mcp_server_started"
    server: str
    tools: tuple[str, ...]
    server_info: str = ""  # the name and version the server gave, when it gave them
    protocol_version: str = ""
    restarts: int = 0


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class MCPServerFailedEvent(AgentEvent):
    """An MCP server could not start, crashed, dropped its connection or did not answer in time.

    ``stage`` says when: ``connect`` (starting it), ``call`` (during a tool
    call) or ``idle`` (between requests; streamed by the next request that
    needs it). The next request that needs it restarts it.
    """

    kind: ClassVar[str] = "mcp_server_failed"
    server: str
    error: str
    stage: Literal["connect", "call", "idle"]


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class SubagentStartedEvent(AgentEvent):
    """Call ``tool_call_id`` started a child request of tool ``agent``; its events follow under ``child_session_id``."""

    kind: ClassVar[str] = "subagent_started"
    tool_call_id: str
    agent: str  # the tool's name
    child_session_id: str
    child_request_id: str
    depth: int  # 1 for a child of a top-level request, 2 for its child, ...


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class SubagentCompletedEvent(AgentEvent):
    """The child request of tool call ``tool_call_id`` ended; ``result`` is what the call's result says."""

    kind: ClassVar[str] = "subagent_completed"
    tool_call_id: str
    agent: str
    child_session_id: str
    child_request_id: str
    outcome: Literal["completed", "failed", "cancelled"]
    result: str = ""


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class UsageLimitReachedEvent(AgentEvent):
    """A usage limit of the request is reached; ``on_exhausted`` says what follows (``wrap_up`` or ``fail``)."""

    kind: ClassVar[str] = "usage_limit_reached"
    limit: str
    on_exhausted: str


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class WaitExpiredEvent(AgentEvent):
    """Nobody answered a waiting call in time: it took its default (``outcome``), and the request goes on.

    ``expires_at`` is the wait's deadline (seconds since the epoch); an answer arriving later is refused.
    """

    kind: ClassVar[str] = "wait_expired"
    tool_call_id: str
    awaited_event: str  # the answer that was awaited (not a question: no response_event field)
    expires_at: float
    outcome: str

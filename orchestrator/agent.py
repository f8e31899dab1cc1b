"""Agent, AgentClient and create_agent: the public entry points."""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from machines.build import Step, steps_in
from orchestrator.checks import each, flag, function, number, of_type, whole
from orchestrator.checks import text as _text
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Delivery, Refusal
from orchestrator.errors import SessionBusy
from orchestrator.events import AgentEvent
from orchestrator.extensions.base import HOOK_NAMES, AgentExtension, overrides
from orchestrator.extensions.steering import SteeringExtension
from orchestrator.history import InMemoryHistory, SessionHistory, session_messages
from orchestrator.limits import RunUsage, UsageLimits
from orchestrator.messages import AssistantMessage, ContentPart, Message, UserMessage, user_message
from orchestrator.model import DEFAULT_SETTINGS, Model, ModelSettings, check_settings
from orchestrator.output import OutputType
from orchestrator.output import output_type as _output_type
from orchestrator.runtime.budget import Budget
from orchestrator.runtime.compactor import TurnCompactor
from orchestrator.runtime.fingerprint import AgentFingerprint, OnAgentChanged, check_policy, fingerprint_of
from orchestrator.runtime.handle import RETAINED_EVENTS, RunHandle, RunRegistry, start_run
from orchestrator.runtime.inbox import InputInbox
from orchestrator.runtime.pending import PendingCall, WaitingCalls, pending_calls
from orchestrator.runtime.ports import RunPort
from orchestrator.runtime.redaction import Redactor
from orchestrator.runtime.restored import Restored
from orchestrator.runtime.run import RequestRun
from orchestrator.runtime.sinks import EventSink
from orchestrator.runtime.stream import RunStream
from orchestrator.tools import ToolDefinition

if TYPE_CHECKING:
    from orchestrator.events import CompactionCompletedEvent
    from orchestrator.observe.trace import NestedTrace
    from orchestrator.store.retention import PruneReport, Retention

log = logging.getLogger("orchestrator.agent")

_DEFAULT = object()

RECENT_SESSIONS = 1024
"""Sessions, not running, whose latest request an agent keeps for ``transitions``, ``trace`` and ``usage``: those
whose request ended last in this process (the oldest is dropped first; a running request always answers)."""


@attrs.frozen
class _Ended:
    """What an agent keeps of a session's latest ended request: the edges it took, and its budget when limited."""

    steps: list[Step]
    budget: Budget | None


def _new_request_id() -> str:
    """A random version-4 UUID as 32 hex digits (what ``uuid.uuid4().hex`` gives, without importing uuid)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


def _order(extensions: Iterable[AgentExtension]) -> list[AgentExtension]:
    ordered = sorted(extensions, key=lambda extension: extension.priority)
    names: set[str] = set()
    for extension in ordered:
        if not isinstance(extension, AgentExtension):
            raise TypeError(f"{extension!r} is not an AgentExtension")
        if extension.name in names:
            raise ValueError(f"two extensions are named {extension.name!r}; set a distinct name")
        names.add(extension.name)
    return ordered


def _one_of_each_kind(inboxes: Iterable[InputInbox]) -> list[InputInbox]:
    """The inboxes, refused when two are of one class: each would take (and answer) every message."""
    found = list(inboxes)
    kinds = [type(inbox) for inbox in found]
    for kind in kinds:
        if kinds.count(kind) > 1:
            raise ValueError(f"an Agent takes one {kind.__name__}: two would each queue (and answer) every message")
    return found


class _Collect:
    """The event sink of a compaction pass: keeps what it streamed."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []

    def offer(self, event: AgentEvent) -> bool:
        self.events.append(event)
        return True

    async def put(self, event: AgentEvent) -> None:
        self.events.append(event)


def _with_steering(extensions: Iterable[AgentExtension], steering: bool) -> list[AgentExtension]:
    """``extensions`` with the agent's own SteeringExtension unless one is given or ``steering`` is False."""
    given = list(extensions)
    has_one = any(isinstance(extension, SteeringExtension) for extension in given)
    if not steering:
        if has_one:
            raise ValueError("steering=False, but a SteeringExtension is among the extensions")
        return given
    return given if has_one else [*given, SteeringExtension()]


_HISTORY_METHODS = ("load", "append", "replace")


class Agent:
    """A model, tools and extensions, serving any number of sessions at once.

    Every agent owns a SteeringExtension (its urgent user inbox): the one among
    ``extensions`` when one is given, otherwise a new one; ``steering=False``
    leaves it out, and steering is then refused. Each argument is checked here: a
    wrong type raises TypeError, a bad value ValueError, naming it.
    ``deps_factory``, when given, makes a request's ``context.deps`` from its
    ``metadata`` whenever the request is not given deps (a run resumed from a store).
    ``on_agent_changed`` (``"warn"``, ``"refuse"`` or a callable) is what a run resumed by this agent does
    when another agent started it (``orchestrator.runtime.fingerprint.check_resumed``).
    """

    def __init__(
        self,
        model: Model,
        *,
        extensions: Iterable[AgentExtension] = (),
        tools: Iterable[ToolDefinition] = (),
        system_prompt: str | None = None,
        max_iterations: int = 25,
        history: SessionHistory | None = None,
        steering: bool = True,
        usage_limits: UsageLimits | None = None,
        tool_timeout: float | None = None,
        model_settings: ModelSettings | None = None,
        output_type: object = None,
        deps_factory: Callable[[Mapping[str, Any]], Any] | None = None,
        max_concurrent_model_calls: int | None = None,
        max_concurrent_runs: int | None = None,
        redact: Redactor | None = None,
        on_agent_changed: OnAgentChanged = "warn",
    ) -> None:
        if not callable(getattr(model, "stream", None)):
            raise TypeError(f"Agent.model must be a Model (with a stream method), got {type(model).__name__}")
        extensions = each(AgentExtension, "an AgentExtension", "Agent.extensions", extensions)
        tools = each(ToolDefinition, "a ToolDefinition", "Agent.tools", tools)
        _text(optional=True).check("Agent.system_prompt", system_prompt)
        whole(1).check("Agent.max_iterations", max_iterations)
        flag().check("Agent.steering", steering)
        of_type(UsageLimits, "a UsageLimits", optional=True).check("Agent.usage_limits", usage_limits)
        number(above=0, optional=True).check("Agent.tool_timeout", tool_timeout)
        whole(1, optional=True).check("Agent.max_concurrent_model_calls", max_concurrent_model_calls)
        whole(1, optional=True).check("Agent.max_concurrent_runs", max_concurrent_runs)
        if model_settings is not None and not isinstance(model_settings, ModelSettings):
            kind = type(model_settings).__name__
            raise TypeError(f"Agent.model_settings must be a ModelSettings or None, got {kind}")
        check_settings(model, model_settings)
        function(optional=True).check("Agent.deps_factory", deps_factory)
        function(optional=True).check("Agent.redact", redact)
        if history is not None and not all(callable(getattr(history, name, None)) for name in _HISTORY_METHODS):
            raise TypeError(f"Agent.history must be a SessionHistory or None, got {type(history).__name__}")
        self.on_agent_changed: OnAgentChanged = check_policy(on_agent_changed, "Agent.on_agent_changed")
        self._fingerprint: AgentFingerprint | None = None
        self.model = model
        self.extensions = _order(_with_steering(extensions, steering))
        self.tools = list(tools)
        self.system_prompt = system_prompt
        self.max_iterations = max_iterations
        self.history = history
        self.usage_limits = usage_limits
        self.tool_timeout = tool_timeout
        # Shared by every request of the agent: a model call past the cap waits for a slot.
        cap = max_concurrent_model_calls
        self.model_calls = None if cap is None else trio.CapacityLimiter(cap)
        # A request past this cap waits, idle (not started), for a running one to end.
        runs = max_concurrent_runs
        self.run_slots = None if runs is None else trio.CapacityLimiter(runs)
        self.model_settings = model_settings or DEFAULT_SETTINGS
        self.output_type: OutputType | None = _output_type(output_type)
        self.deps_factory = deps_factory
        # Changes every event and message before it is stored or sent (see orchestrator.runtime.redaction).
        self.redact = redact
        self.hooks: dict[str, list[AgentExtension]] = {
            hook: [e for e in self.extensions if overrides(e, hook)] for hook in HOOK_NAMES
        }
        self.inboxes: list[InputInbox] = _one_of_each_kind(e for e in self.extensions if isinstance(e, InputInbox))
        self.compactors: list[TurnCompactor] = [e for e in self.extensions if isinstance(e, TurnCompactor)]
        self._live: dict[str, RequestRun] = {}
        # The steps and budget of the latest request of the RECENT_SESSIONS sessions whose request ended last,
        # oldest first (a running session is only in _live): its messages and tools are not kept alive.
        self._recent: OrderedDict[str, _Ended] = OrderedDict()
        # Runs started with AgentClient.start, for attach.
        self.runs = RunRegistry()
        # Calls waiting for an external answer (every ResponseRouter's), for pending().
        self.waiting = WaitingCalls()

    @property
    def fingerprint(self) -> AgentFingerprint:
        """The agent's fingerprint (its model's name, tools and extensions), computed on first use and kept."""
        found = self._fingerprint
        if found is None:
            found = self._fingerprint = fingerprint_of(self)
        return found

    # requests ---------------------------------------------------------------

    def start(
        self,
        user_input: str | UserMessage | Sequence[ContentPart],
        config: AgentRunConfig | None = None,
        deps: Any = None,
    ) -> RunStream:
        """A stream of one request's events; the request starts on first iteration."""
        config = config or AgentRunConfig()
        return RunStream(self, config, user_message(user_input), deps)

    async def _open_run(
        self,
        config: AgentRunConfig,
        message: UserMessage | None,
        sink: EventSink | None,
        restored: Restored | None = None,
        deps: Any = None,
    ) -> RequestRun:
        """Register a new request of ``config.session_id``, its ``context.deps`` being ``deps``, else made by
        ``deps_factory`` from ``config.metadata`` (an error of the factory reaches the caller; nothing is registered).

        A request whose stream was dropped is being cancelled and will end
        without anyone waiting for it: wait for that end rather than refusing.
        Any other running request of the session makes this one SessionBusy, and
        run settings the model cannot send UnsupportedSetting.
        """
        check_settings(self.model, config.model_settings)
        live = self._live.get(config.session_id)
        while live is not None and live.abandoned:
            await live.wait_left()
            live = self._live.get(config.session_id)
        if live is not None:
            raise SessionBusy(config.session_id)
        if deps is None and self.deps_factory is not None:
            deps = self.deps_factory(config.metadata)
        request_id = config.request_id or _new_request_id()
        run = RequestRun(self, config, request_id, message, sink, restored)
        run.context.deps = deps
        self._live[config.session_id] = run
        self._recent.pop(config.session_id, None)
        return run

    def _close_run(self, run: RunPort) -> None:
        session_id = run.context.session_id
        if self._live.get(session_id) is run:
            del self._live[session_id]
            self._remember(session_id, run)
        run.mark_left()

    def _latest(self, session_id: str) -> _Ended | None:
        """The steps and budget of the session's running request, else of its most recent one still kept."""
        live = self._live.get(session_id)
        return _Ended(live.machine.history, live.budget) if live is not None else self._recent.get(session_id)

    def _remember(self, session_id: str, run: RunPort) -> None:
        """Keep the steps and budget of ``run``, the session's request that just ended, as the most recent; forget
        the oldest sessions past RECENT_SESSIONS."""
        self._recent[session_id] = _Ended(run.machine.history, run.budget)
        self._recent.move_to_end(session_id)
        while len(self._recent) > RECENT_SESSIONS:
            self._recent.popitem(last=False)

    async def compact(self, config: AgentRunConfig) -> CompactionCompletedEvent | None:
        """Restore the session through on_tool and on_state, then run on_compact.

        Returns what the pass did: the last ``compaction_completed`` event an
        extension emitted (tokens before and after, messages replaced), or None
        when nothing was compacted. Every event of the pass reaches on_event.
        """
        from orchestrator.events import CompactionCompletedEvent  # an optional feature's event, built on first use

        sink = _Collect()
        run = await self._open_run(config, None, sink)
        try:
            await run.compact()
        finally:
            self._close_run(run)
        done = [event for event in sink.events if isinstance(event, CompactionCompletedEvent)]
        return done[-1] if done else None

    # external events --------------------------------------------------------

    def deliver(self, event: ExternalEvent, *, config: AgentRunConfig) -> Delivery:
        """Offer ``event`` to every extension: who took it, and each refusal's reason.

        Safe to call from any thread. An extension whose ``consider`` raises is
        listed as refusing with the error (and the error is logged); every
        refusal is logged at INFO under ``orchestrator.agent``. ``event`` must
        be an ExternalEvent and ``config`` an AgentRunConfig: anything else
        raises TypeError at once, before any extension sees it.
        """
        if not isinstance(event, ExternalEvent):
            raise TypeError(f"an external event must be an ExternalEvent, got {type(event).__name__}")
        if not isinstance(config, AgentRunConfig):
            raise TypeError(f"config must be an AgentRunConfig, got {type(config).__name__}")
        accepted: list[str] = []
        refused: dict[str, str] = {}
        for extension in self.extensions:
            try:
                verdict = extension.consider(config, event)
            except Exception as error:
                log.exception("consider() of %s failed for %s", extension.name, event.name)
                refused[extension.name] = f"failed: {type(error).__name__}: {error}"
                continue
            if isinstance(verdict, Refusal):
                refused[extension.name] = verdict.reason
                log.info(
                    "%s refused %s for session %r: %s", extension.name, event.name, config.session_id, verdict.reason
                )
            elif verdict:
                accepted.append(extension.name)
        return Delivery(event.name, tuple(accepted), refused)

    def emit_external_event(self, event: ExternalEvent, *, config: AgentRunConfig) -> list[str]:
        """Offer ``event`` to every extension; the names of those that accepted it.

        Safe to call from any thread. An empty list means nobody took it;
        ``deliver`` says why. Raises TypeError as ``deliver`` does.
        """
        return list(self.deliver(event, config=config).accepted)

    # inspection -------------------------------------------------------------

    def state(self, session_id: str) -> str | None:
        """Phase of the session's running request, or None when none runs."""
        run = self._live.get(session_id)
        return run.machine.state() if run else None

    def states(self, session_id: str) -> dict[str, str] | None:
        """Every region's state of the session's running request."""
        run = self._live.get(session_id)
        return run.machine.states if run else None

    def transitions(self, session_id: str, *, region: str | None = None, machine: str | None = None) -> list[Step]:
        """Edges taken by the session's running or most recent request, each naming its machine and region.

        A session that is not running answers for its most recent request only while it is among the latest
        ``RECENT_SESSIONS`` sessions whose request ended in this process; otherwise the list is empty.
        With ``region`` (``"phase"``, ``"mode"``, ...) or ``machine``, only the edges of that region or machine.
        """
        latest = self._latest(session_id)
        return steps_in(latest.steps if latest is not None else (), region=region, machine=machine)

    def child_traces(self, session_id: str, request_id: str | None = None) -> list[NestedTrace]:
        """The paths of the child requests (subagents) of the session's latest request, nested.

        With ``request_id``, only when the session's latest request with children is that one.
        """
        from orchestrator.observe.trace import ChildTraces  # loaded on first use: running a request needs no traces

        return [
            trace
            for extension in self.extensions
            if isinstance(extension, ChildTraces)
            for trace in extension.child_traces(session_id, request_id)
        ]

    def trace(self, session_id: str) -> str:
        """Mermaid flowchart of the path of the session's running or latest request, subagents nested."""
        from orchestrator.observe.trace import trace_mermaid

        return trace_mermaid(self.transitions(session_id), children=self.child_traces(session_id))

    def pending(self, session_id: str | None = None) -> list[PendingCall]:
        """Calls waiting for an external answer, oldest first (optionally of one session).

        Live waits of running requests, then waits a session store recorded in an
        earlier process and still holds unanswered (``live=False``).
        """
        return pending_calls(self.waiting, self.extensions, self._live, session_id)

    def running(self) -> list[str]:
        """Sessions with a running request."""
        return list(self._live)

    async def delete_session(self, session_id: str, *, cancel: bool = False) -> bool:
        """Remove the session from this agent: its history, finished runs and their event logs, and its rows
        (messages, waits and answers, Plan Mode) in a session store extension's store; whether any was there.

        SessionBusy while a request of it runs here (or another process holds it in the store), unless
        ``cancel``: a request started with ``start`` is then cancelled and its end awaited first (one that
        ``run`` runs in a caller's task stays SessionBusy: its caller cancels it).
        """
        live = self._live.get(session_id)
        if live is not None:
            handle = next((h for h in self.runs.live() if h.session_id == session_id), None)
            if not cancel or handle is None:
                raise SessionBusy(session_id)
            handle.cancel()
            await live.wait_left()
        found = False
        forget = getattr(self.history, "delete", None)
        if callable(forget):
            found = bool(forget(session_id))
        for extension in self.extensions:
            store = getattr(extension, "store", None)
            if callable(getattr(store, "delete_session", None)) and callable(getattr(store, "lock_session", None)):
                found = await trio.to_thread.run_sync(_delete_stored, store, session_id) or found
        self.runs.forget_session(session_id)
        found = self._recent.pop(session_id, None) is not None or found
        return found

    async def prune(self, retention: Retention, *, now: float | None = None) -> PruneReport:
        """One prune pass at ``now`` (default: the time): finished runs that ended ``retention.ended_runs_after``
        ago go, and sessions of a session store extension's store idle ``retention.idle_sessions_after``
        (removed as ``delete_session`` does). A running or waiting request's session stays, and so does one
        another process holds. Pruned runs' ids are remembered ``retention.tombstones_for``: ``attach`` raises
        RunPruned for them meanwhile."""
        from orchestrator.store.errors import SessionLocked
        from orchestrator.store.retention import PruneReport

        now = time.time() if now is None else now
        runs = 0
        if retention.ended_runs_after is not None:
            runs = self.runs.prune(now - retention.ended_runs_after, now=now)
        gone: list[str] = []
        if retention.idle_sessions_after is not None:
            cutoff = now - retention.idle_sessions_after
            for store in _session_stores(self.extensions):
                for session_id in await trio.to_thread.run_sync(store.idle_sessions, cutoff):
                    if session_id in self._live or session_id in gone:
                        continue  # a request of it runs or waits here
                    self.runs.prune_session(session_id, now=now)
                    try:
                        await self.delete_session(session_id)
                    except (SessionBusy, SessionLocked):
                        continue  # another process runs it
                    gone.append(session_id)
        self.runs.forget_pruned(now - retention.tombstones_for)
        return PruneReport(runs, tuple(gone))

    def working(self) -> list[str]:
        """Sessions whose running request works, not only waits for an answer: what a drain lets finish."""
        return [session for session in self._live if not any(call.live for call in self.pending(session))]

    def usage(self, session_id: str) -> RunUsage | None:
        """What the session's running or latest request spent, when it had usage limits (else None).

        A session that is not running answers for its most recent request only while it is among the latest
        ``RECENT_SESSIONS`` sessions whose request ended in this process; otherwise None.
        """
        latest = self._latest(session_id)
        budget = latest.budget if latest is not None else None
        return budget.report() if budget is not None else None


class AgentClient:
    """The handle ``create_agent`` returns."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def stream(
        self,
        user_input: str | UserMessage | Sequence[ContentPart],
        *,
        config: AgentRunConfig | None = None,
        deps: Any = None,
    ) -> RunStream:
        """Events of one request, as an async iterator; its tools and hooks read ``deps`` as ``context.deps``."""
        return self.agent.start(user_input, config, deps)

    async def start(
        self,
        user_input: str | UserMessage | Sequence[ContentPart],
        *,
        config: AgentRunConfig | None = None,
        retain_events: int = RETAINED_EVENTS,
        deps: Any = None,
    ) -> RunHandle:
        """Start a request that runs on its own; SessionBusy here when the session runs one.

        Read its events with ``handle.events(after=seq)``, as often as needed; the
        request keeps running with or without readers. ``retain_events`` bounds its log.
        """
        return await start_run(
            self.agent, user_message(user_input), config or AgentRunConfig(), retain=retain_events, deps=deps
        )

    def deliver(self, event: ExternalEvent, *, config: AgentRunConfig) -> Delivery:
        """Offer ``event`` to the agent's extensions; see ``Agent.deliver``."""
        return self.agent.deliver(event, config=config)

    def pending(self, session_id: str | None = None) -> list[PendingCall]:
        """Every call waiting for an external answer (see ``Agent.pending``)."""
        return self.agent.pending(session_id)

    def attach(self, request_id: str) -> RunHandle:
        """The handle of a live or recently finished run started with ``start`` (else UnknownRun)."""
        return self.agent.runs.get(request_id)

    async def history(self, session_id: str) -> list[Message]:
        """The session's messages, from the agent's history or its store extension (empty when none knows it)."""
        return await session_messages(self.agent, session_id) or []

    async def run(
        self,
        user_input: str | UserMessage | Sequence[ContentPart],
        *,
        config: AgentRunConfig | None = None,
        deps: Any = None,
    ) -> AssistantMessage:
        """Run one request in the caller's task and return its final answer; tools and hooks read ``context.deps``."""
        run = await self.agent._open_run(config or AgentRunConfig(), user_message(user_input), None, deps=deps)
        try:
            return await run.run()
        finally:
            self.agent._close_run(run)

    async def delete_session(self, session_id: str, *, cancel: bool = False) -> bool:
        """Remove the session everywhere this agent keeps it; see ``Agent.delete_session``."""
        return await self.agent.delete_session(session_id, cancel=cancel)

    async def prune(self, retention: Retention, *, now: float | None = None) -> PruneReport:
        """One prune pass: ended runs and idle sessions past ``retention``; see ``Agent.prune``."""
        return await self.agent.prune(retention, now=now)

    def state(self, session_id: str) -> str | None:
        return self.agent.state(session_id)

    def transitions(self, session_id: str, *, region: str | None = None, machine: str | None = None) -> list[Step]:
        """Edges taken by the session's running or most recent request (of one region or machine when named);
        see ``Agent.transitions`` for how long an ended request is kept."""
        return self.agent.transitions(session_id, region=region, machine=machine)

    def trace(self, session_id: str) -> str:
        """Mermaid flowchart of the path of the session's running or latest request, subagents nested."""
        return self.agent.trace(session_id)

    def usage(self, session_id: str) -> RunUsage | None:
        """What the session's running or latest request spent (see ``Agent.usage``, also for how long it is kept)."""
        return self.agent.usage(session_id)


async def create_agent(
    model: Model,
    *,
    extensions: Iterable[AgentExtension] = (),
    tools: Iterable[ToolDefinition] = (),
    system_prompt: str | None = None,
    max_iterations: int = 25,
    history: SessionHistory | object | None = _DEFAULT,
    steering: bool = True,
    usage_limits: UsageLimits | None = None,
    tool_timeout: float | None = None,
    model_settings: ModelSettings | None = None,
    output_type: object = None,
    deps_factory: Callable[[Mapping[str, Any]], Any] | None = None,
    max_concurrent_model_calls: int | None = None,
    max_concurrent_runs: int | None = None,
    redact: Redactor | None = None,
    on_agent_changed: OnAgentChanged = "warn",
) -> AgentClient:
    """Build an Agent and return its client.

    History is kept in memory (``InMemoryHistory``: the 10,000 most recently used sessions, for
    development and tests) unless ``history`` is given (None keeps none). The
    agent steers with its own SteeringExtension unless one is among
    ``extensions`` or ``steering`` is False. ``usage_limits`` bounds what each
    request spends (a run's ``AgentRunConfig.usage_limits`` replaces it);
    ``tool_timeout`` (seconds) bounds each tool call whose tool sets no timeout.
    ``model_settings`` apply to every request (a run's ``AgentRunConfig.model_settings`` take
    their place); a setting the model's API has no field for raises UnsupportedSetting here.
    With ``output_type`` (a dataclass, attrs class, TypedDict, pydantic model, other type hint,
    JSON Schema dict, or an OutputType) every final answer must be JSON of that type:
    ``client.run`` then returns a StructuredAnswer whose ``output`` is the value.
    ``deps_factory(metadata)`` makes the ``context.deps`` of a request started without deps (a
    run resumed from a store).
    ``max_concurrent_model_calls`` caps the model calls the agent's requests make at once; a call
    past it waits for one to end; ``max_concurrent_runs`` caps the requests running at once (one
    waiting for an answer included): a request past it stays ``idle`` until one ends, and never
    fails for it (see docs/concurrency.md).
    ``redact`` (an event or a message in, the one to keep out) changes what is stored and sent: every
    event streamed or delivered to ``on_event``, every message entering ``history``; the request and
    its model keep the original (see ``orchestrator.runtime.redaction`` and docs/operations.md).
    ``on_agent_changed`` says what a run resumed by this agent does when another agent (another
    fingerprint: tools, extensions, model) started it: ``"warn"`` (an ``agent_changed`` event, the run
    goes on), ``"refuse"`` (the run fails with AgentChanged) or a migration hook (see docs/agent-changes.md).
    """
    store: SessionHistory | None = InMemoryHistory() if history is _DEFAULT else history  # type: ignore[assignment]
    agent = Agent(
        model,
        extensions=extensions,
        tools=tools,
        system_prompt=system_prompt,
        max_iterations=max_iterations,
        history=store,
        steering=steering,
        usage_limits=usage_limits,
        tool_timeout=tool_timeout,
        model_settings=model_settings,
        output_type=output_type,
        deps_factory=deps_factory,
        max_concurrent_model_calls=max_concurrent_model_calls,
        max_concurrent_runs=max_concurrent_runs,
        redact=redact,
        on_agent_changed=on_agent_changed,
    )
    return AgentClient(agent)


def _session_stores(extensions: Iterable[AgentExtension]) -> list[Any]:
    """The session stores of the extensions that keep one (each once)."""
    stores: list[Any] = []
    for extension in extensions:
        store = getattr(extension, "store", None)
        if callable(getattr(store, "idle_sessions", None)) and not any(store is kept for kept in stores):
            stores.append(store)
    return stores


def _delete_stored(store: Any, session_id: str) -> bool:
    """Delete the session's rows from a session store, holding it; SessionBusy when another process runs it."""
    from orchestrator.store.errors import SessionLocked

    try:
        lock = store.lock_session(session_id)
    except SessionLocked:
        raise SessionBusy(session_id) from None
    try:
        return bool(store.delete_session(session_id))
    finally:
        lock.release()

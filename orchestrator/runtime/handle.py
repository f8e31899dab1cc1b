"""RunHandle: a request that outlives its consumers, with a bounded, replayable event log.

``await client.start(...)`` opens the request (``SessionBusy`` is raised there)
and runs it in its own trio system task, which depends on no consumer. Every
event the request streams is recorded in the request's ``EventLog``; the nth
event has ``seq`` n. ``handle.events(after=seq)`` replays what the log still
holds after ``seq`` and then follows the request live until its end. Any number
of consumers may read at once, at their own pace, and come and go: reading never
slows the request, and the request never waits for a reader. Memory is bounded
by the log: it keeps the last ``RETAINED_EVENTS`` events, and a reader that asks
for (or falls behind to) an older ``seq`` gets ``EventsExpired``.

Finished runs stay reachable through ``client.attach(request_id)`` until
``RETAINED_RUNS`` later runs of the same agent have finished; a finished run
keeps its log, its final states and its outcome, not its request.
"""

from __future__ import annotations

import collections
import contextvars
import time
from typing import TYPE_CHECKING, Any, Protocol

import trio

from machines.build import Step, steps_in
from orchestrator.errors import AgentError
from orchestrator.events import AgentEvent
from orchestrator.messages import AssistantMessage, UserMessage
from orchestrator.runtime.ports import RunOpener
from orchestrator.runtime.stream import _drive, _Outcome

if TYPE_CHECKING:
    from orchestrator.config import AgentRunConfig

RETAINED_EVENTS = 10_000
"""Events a run's log keeps by default (the most recent ones)."""

RETAINED_RUNS = 64
"""Finished runs an agent keeps reachable through ``attach`` by default (the most recent ones)."""

TOMBSTONES = 100_000
"""Most pruned runs' ids an agent remembers (about 100 bytes each), so following one answers 410, not 404."""

READ_BATCH = 256
"""Most events one read of the log hands over at once."""

YIELD_EVERY = 128
"""A request recording events without awaiting anything else yields to the loop after this many.

(A model that streams without ever awaiting would otherwise hold the whole trio loop until it ends:
no reader, no other request and no cancellation could run.)"""


class EventsExpired(AgentError):
    """The events after ``after`` are no longer retained: the log starts at ``first``."""

    def __init__(self, request_id: str, after: int, first: int) -> None:
        super().__init__(
            f"request {request_id!r}: events after seq {after} are no longer retained "
            f"(the log holds seq {first} onwards); read from history instead"
        )
        self.request_id = request_id
        self.after = after
        self.first = first


class UnknownRun(AgentError, KeyError):
    """No live or retained run has this request id."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"no live or recently finished run has request id {request_id!r}")
        self.request_id = request_id

    def __str__(self) -> str:
        return str(self.args[0])


class RunPruned(UnknownRun):
    """The run ``request_id`` was pruned (``reason``: ``ended`` past its retention, or ``idle_session``) at
    ``pruned`` (a time.time() value): its events and state are gone. Routes answer it 410, not 404."""

    def __init__(self, request_id: str, reason: str, pruned: float) -> None:
        super().__init__(request_id)
        why = "its session was idle past its retention" if reason == "idle_session" else "it ended past its retention"
        self.args = (f"run {request_id!r} was pruned ({why}): its events and state are gone",)
        self.reason = reason
        self.pruned = pruned


class RunCancelled(AgentError):
    """``result()`` of a run that was cancelled."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"request {request_id!r} was cancelled")
        self.request_id = request_id


class EventLog:
    """The last ``limit`` events of one request; the event sink of a started run.

    Recording never waits for a reader; every ``YIELD_EVERY`` events it passes a
    trio checkpoint, so a request that never awaits still lets others run.
    """

    def __init__(self, request_id: str, limit: int = RETAINED_EVENTS) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise TypeError(f"retain_events must be an int, got {type(limit).__name__}")
        if limit < 1:
            raise ValueError("a run's log must keep at least one event")
        self.request_id = request_id
        self._events: collections.deque[AgentEvent] = collections.deque(maxlen=limit)
        self._count = 0
        self._unyielded = 0
        self._closed = False
        self._readers = trio.lowlevel.ParkingLot()

    @property
    def last_seq(self) -> int:
        """``seq`` of the latest event (0 before the first)."""
        return self._count

    @property
    def first_seq(self) -> int:
        """``seq`` of the oldest event still retained."""
        return self._count - len(self._events) + 1

    @property
    def closed(self) -> bool:
        """Whether the request has ended (no event will follow)."""
        return self._closed

    # the request's side (EventSink) -----------------------------------------

    def offer(self, event: AgentEvent) -> bool:
        if self._unyielded >= YIELD_EVERY:
            return False  # the request yields in ``put``
        self._unyielded += 1
        self._events.append(event)
        self._count += 1
        if self._readers:
            self._readers.unpark_all()
        return True

    async def put(self, event: AgentEvent) -> None:
        """Record ``event``, then let other tasks run (readers, other requests, a cancellation)."""
        self._unyielded = 0
        self.offer(event)
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        self._closed = True
        self._readers.unpark_all()

    # the readers' side ------------------------------------------------------

    def check(self, after: int) -> None:
        """Raise EventsExpired unless every event after ``after`` is still retained."""
        if after < 0:
            raise ValueError(f"after must be a seq (0 or more), got {after}")
        first = self.first_seq
        if after < first - 1:
            raise EventsExpired(self.request_id, after, first)

    def read_nowait(self, after: int, limit: int = READ_BATCH) -> list[AgentEvent]:
        """Up to ``limit`` retained events after ``after``, oldest first (empty when none yet)."""
        self.check(after)
        offset = after - (self.first_seq - 1)
        stop = min(len(self._events), offset + limit)
        events = self._events
        return [events[index] for index in range(offset, stop)]

    async def read(self, after: int, limit: int = READ_BATCH) -> list[AgentEvent]:
        """Like ``read_nowait``, waiting for at least one event; empty once the request ended."""
        while True:
            events = self.read_nowait(after, limit)
            if events or self._closed:
                await trio.lowlevel.checkpoint()
                return events
            await self._readers.park()


class EventFollower:
    """One reader of a run's events: an async iterator that replays, then follows live.

    It ends after the request's last event (``run_completed``, ``run_failed`` or
    ``run_cancelled``). Leaving it (or dropping it) affects nothing else.
    """

    def __init__(self, log: EventLog, after: int) -> None:
        if isinstance(after, bool) or not isinstance(after, int):
            raise TypeError(f"after must be a seq (an int, 0 or more), got {type(after).__name__}")
        log.check(after)
        self._log = log
        self.position = after
        """``seq`` of the last event this reader was handed."""
        self._ready: collections.deque[AgentEvent] = collections.deque()

    def __aiter__(self) -> EventFollower:
        return self

    async def __anext__(self) -> AgentEvent:
        if not self._ready:
            self._ready.extend(await self._log.read(self.position))
            if not self._ready:
                raise StopAsyncIteration
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        self.position += 1
        return self._ready.popleft()

    @property
    def ended(self) -> bool:
        """Whether the run has ended and this reader was handed every event it will get (``batch`` gives none)."""
        return not self._ready and self._log.closed and self.position >= self._log.last_seq

    async def batch(self, limit: int = READ_BATCH) -> list[AgentEvent]:
        """The next events (at least one, at most ``limit``); empty once the run has ended."""
        if self._ready:
            await trio.lowlevel.checkpoint_if_cancelled()
            events = [self._ready.popleft() for _ in range(min(limit, len(self._ready)))]
        else:
            events = await self._log.read(self.position, limit)
        self.position += len(events)
        return events


class RunHandle:
    """A started request: its events, state, outcome and cancellation."""

    def __init__(self, outcome: _Outcome, log: EventLog) -> None:
        assert outcome.run is not None
        self.request_id = outcome.run.context.request_id
        self.session_id = outcome.run.context.session_id
        self._outcome = outcome
        self._log = log
        self._states: dict[str, str] = outcome.run.machine.states
        self._steps: list[Step] = outcome.run.machine.history

    @property
    def states(self) -> dict[str, str]:
        """Every region's state of the request machine (the final ones once it ended)."""
        run = self._outcome.run
        return run.machine.states if run is not None else dict(self._states)

    @property
    def state(self) -> str:
        """The request's phase (``completed``, ``failed`` or ``cancelled`` once it ended)."""
        return self.states["phase"]

    @property
    def transitions(self) -> list[Step]:
        """Every edge the request took so far, in order (all of them once it ended)."""
        return list(self._steps)

    def steps(self, *, region: str | None = None, machine: str | None = None) -> list[Step]:
        """The edges the request took so far in one region or machine (``steps(region="phase")``), in order."""
        return steps_in(self._steps, region=region, machine=machine)

    @property
    def done(self) -> bool:
        return self._outcome.finished

    @property
    def last_seq(self) -> int:
        """``seq`` of the latest event the request streamed."""
        return self._log.last_seq

    @property
    def first_seq(self) -> int:
        """``seq`` of the oldest event still retained."""
        return self._log.first_seq

    def events(self, after: int = 0) -> EventFollower:
        """The events after ``after``: replayed, then live, until the request's end.

        Raises EventsExpired when events after ``after`` are no longer retained (also
        later, for a reader that falls that far behind).
        """
        return EventFollower(self._log, after)

    def cancel(self) -> None:
        """Cancel the request (no effect once it ended); it settles its open calls and ends ``cancelled``."""
        self._outcome.scope.cancel()

    def abandon(self) -> None:
        """Cancel the request for a caller that will never see it: a new request of its session waits for its end."""
        run = self._outcome.run
        if run is not None and not self._outcome.finished:
            run.abandoned = True
        self._outcome.scope.cancel()

    async def wait(self) -> None:
        """Wait until the request has ended."""
        await self._outcome.wait()

    async def result(self) -> AssistantMessage:
        """The final answer; the request's error, or RunCancelled, when it has none."""
        await self._outcome.wait()
        if self._outcome.error is not None:
            raise self._outcome.error
        if self._outcome.result is None:
            raise RunCancelled(self.request_id)
        return self._outcome.result

    def _finish(self) -> None:
        """The request left its session: keep its final states, let the request go."""
        run = self._outcome.run
        if run is not None:
            self._states = run.machine.states
            self._outcome.run = None
        self._log.close()

    def __repr__(self) -> str:
        return f"RunHandle(request_id={self.request_id!r}, session_id={self.session_id!r}, state={self.state!r})"


class RunRegistry:
    """An agent's started runs by request id: every live one and the last ``keep`` finished ones.

    A request id names the latest run started with it (ids chosen by the caller may repeat).
    """

    def __init__(self, keep: int = RETAINED_RUNS) -> None:
        self.keep = keep
        self._live: dict[str, RunHandle] = {}
        self._finished: collections.OrderedDict[str, RunHandle] = collections.OrderedDict()
        self._ended: dict[str, float] = {}  # when each finished run ended
        # Pruned runs' ids, oldest first: (reason, when); at most TOMBSTONES of them.
        self._pruned: collections.OrderedDict[str, tuple[str, float]] = collections.OrderedDict()

    def add(self, handle: RunHandle) -> None:
        self._finished.pop(handle.request_id, None)
        self._ended.pop(handle.request_id, None)
        self._pruned.pop(handle.request_id, None)
        self._live[handle.request_id] = handle

    def finished(self, handle: RunHandle) -> None:
        """Keep ``handle`` as finished, unless a later run took its request id."""
        if self._live.get(handle.request_id) is not handle:
            return
        del self._live[handle.request_id]
        self._finished[handle.request_id] = handle
        self._ended[handle.request_id] = time.time()
        while len(self._finished) > self.keep:
            request_id, _ = self._finished.popitem(last=False)
            self._ended.pop(request_id, None)

    def get(self, request_id: str) -> RunHandle:
        """The run ``request_id``; RunPruned when it was pruned (and is remembered), else UnknownRun."""
        handle = self._live.get(request_id) or self._finished.get(request_id)
        if handle is None:
            pruned = self._pruned.get(request_id)
            if pruned is not None:
                raise RunPruned(request_id, *pruned)
            raise UnknownRun(request_id)
        return handle

    def prune(self, ended_before: float, *, now: float | None = None) -> int:
        """Drop the finished runs that ended before ``ended_before``, remembering their ids; how many."""
        gone = [request_id for request_id, ended in self._ended.items() if ended < ended_before]
        for request_id in gone:
            self._bury(request_id, "ended", now)
        return len(gone)

    def prune_session(self, session_id: str, *, now: float | None = None) -> None:
        """Drop the finished runs of ``session_id``, remembering their ids as pruned with an idle session."""
        for request_id, handle in list(self._finished.items()):
            if handle.session_id == session_id:
                self._bury(request_id, "idle_session", now)

    def _bury(self, request_id: str, reason: str, now: float | None) -> None:
        self._finished.pop(request_id, None)
        self._ended.pop(request_id, None)
        self._pruned[request_id] = (reason, time.time() if now is None else now)
        self._pruned.move_to_end(request_id)
        while len(self._pruned) > TOMBSTONES:
            self._pruned.popitem(last=False)

    def forget_pruned(self, before: float) -> None:
        """Forget the runs pruned before ``before``: asking for one is then UnknownRun."""
        while self._pruned and next(iter(self._pruned.values()))[1] < before:
            self._pruned.popitem(last=False)

    def live(self) -> list[RunHandle]:
        return list(self._live.values())

    def of_session(self, session_id: str) -> list[RunHandle]:
        """The session's runs still kept, oldest first (a session runs one request at a time)."""
        kept = [*self._finished.values(), *self._live.values()]
        return [handle for handle in kept if handle.session_id == session_id]

    def forget_session(self, session_id: str) -> None:
        """Drop the finished runs of ``session_id`` (their handles and event logs)."""
        for request_id, handle in list(self._finished.items()):
            if handle.session_id == session_id:
                del self._finished[request_id]
                self._ended.pop(request_id, None)


class RunLauncher(RunOpener, Protocol):
    """An agent as ``start_run`` uses it: it opens and closes requests, and keeps their handles."""

    @property
    def runs(self) -> RunRegistry: ...


async def start_run(
    agent: RunLauncher,
    message: UserMessage,
    config: AgentRunConfig,
    *,
    retain: int = RETAINED_EVENTS,
    deps: Any = None,
) -> RunHandle:
    """Open a request of ``config.session_id`` (SessionBusy here) and run it in a task of its own."""
    log = EventLog(config.request_id or "", retain)
    run = await agent._open_run(config, message, log, deps=deps)
    log.request_id = run.context.request_id
    outcome = _Outcome(run)
    handle = RunHandle(outcome, log)
    agent.runs.add(handle)

    def on_end() -> None:
        handle._finish()
        agent.runs.finished(handle)

    # The caller's context goes with the request (a span the caller opened is the parent of the request's).
    trio.lowlevel.spawn_system_task(
        _drive, agent, outcome, on_end, name=f"request {handle.request_id}", context=contextvars.copy_context()
    )
    return handle

"""``Worker``: claims runnable runs from a run store and carries them through the request machine.

Each claimed run is resumed from its checkpoint (or started, when it never
ran) in the worker's trio loop, beside three tasks of its own: the heartbeat
renews the lease every third of its length (it runs in this loop, so blocking
tools must run in threads: ``@tool(thread=True)``), the inbox reader hands
answers and steering posted by any web node to the run's extensions (woken by the
store when the run's inbox gets an item, see ``Wakeups``), and the flusher commits
streamed events no other commit took along within ``FLUSH_SECONDS``. A run that only waits for answers is parked:
its worker lets it go, and whichever worker claims it after an answer arrives
resumes it. A parked run whose wait expires is stored with that expiry (``wake_at``): each worker keeps
one timer on the earliest ``wake_at`` of the store (``next_wake``; a run parked with an earlier one
wakes the workers to look again) and claims the run once it passes, so the resumed wait takes its
default. A worker claims again the moment a run ends or a new one is queued. A run it claims while the segment
before it in the same session still unwinds here (a question answered at once) starts once that segment ended.
A worker that stops (killed, or its lease lost) leaves its runs to
be claimed again once their leases expire; on SQLite, a worker that starts takes
over at once the runs of this machine's workers whose processes are gone. A worker that drains (``drain``:
SIGTERM to ``python -m orchestrator worker``) stops claiming, lets each run
finish the step it is in, and hands every run it holds back at its last commit
with the lease ended at once, so another worker resumes it without waiting for
the lease to expire.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import time
import uuid
from typing import Any

import attrs
import trio

from orchestrator.agent import AgentClient
from orchestrator.checks import number
from orchestrator.cluster.checkpoint import Checkpoint, UnreadableCheckpoint, cancelled_results, read, restored
from orchestrator.cluster.durable import FLUSH_SECONDS, DurableExtension, DurableRun
from orchestrator.cluster.group_commit import GroupCommit
from orchestrator.cluster.history import StoreHistory
from orchestrator.cluster.run_settings import decode_run_settings
from orchestrator.cluster.takeover import process_started, take_over_local
from orchestrator.cluster.wakeups import Wakeup, Wakeups
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.errors import SessionBusy
from orchestrator.events import RunCancelledEvent, RunFailedEvent
from orchestrator.limits import UsageLimits, usage_limits_from_json
from orchestrator.messages import Message, UserMessage
from orchestrator.model import UnsupportedSetting
from orchestrator.observe.trace_context import TraceAnchor, traced_under
from orchestrator.runtime.restored import Restored
from orchestrator.store.changes import INBOX, WORK
from orchestrator.store.errors import SessionLocked, StoreError, StoreUnavailable
from orchestrator.store.retention import TOMBSTONE_SECONDS
from orchestrator.store.runs import Claimed, Lease, LeaseLost, RunCommit, RunRecord, RunStore, StoredEvent
from orchestrator.wire.format import WireFormatError, decode_message, encode_event

log = logging.getLogger("orchestrator.cluster")

LEASE_SECONDS = 15.0
"""How long a claimed run stays a worker's without a heartbeat; a crashed worker's runs are taken over after it."""
POLL_SECONDS = 1.0
"""Longest wait between looks for runnable runs (a new run, an answer or a freed slot wakes a worker sooner)."""
INBOX_SECONDS = 5.0
"""Longest wait between looks at the inbox of a run a worker holds (an item posted to it wakes the run sooner)."""
CAPACITY = 64
"""Runs a worker carries at once by default: runs mostly wait on a model or a tool, not on this process."""
BUSY_RETRY_SECONDS = 1.0
"""How long a run its worker could not run (its session runs here already, or in ``chat`` on the same SQLite file)
waits before it may be claimed again."""
RETENTION_SECONDS = 7 * 24 * 3600.0
"""Ended runs, with their events and inbox, are pruned this long after their last change (7 days)."""
WAKE_FLOOR_SECONDS = 0.05
"""Shortest wait of the expiry timer (a wake_at that passed while another worker takes its run is no busy loop)."""
RESUME_RESERVE_SHARE = 8
"""By default a worker keeps capacity // 8 of its slots for runs that ran before (answered, given back, taken
over): new runs take the others, so a resumed run never waits for a burst of new ones to end or park."""
GRACE_SECONDS = 30.0
"""How long a drain lets the steps running in it finish before it hands their runs back where they are."""


@attrs.frozen
class RunStart:
    """Where a claimed run is carried from: its lease and durable link, its config, the input it starts with (None
    when it resumes), where it resumes (None when it starts), and the ``Wakeups.mark`` after which a change of its
    inbox may be missing from what the claim read (None: the inbox is read at once)."""

    lease: Lease
    durable: DurableRun
    config: AgentRunConfig
    message: UserMessage | None
    resume: Restored | None
    inbox_read: int | None = None


def default_name() -> str:
    """``host:pid:random``: this machine, this process, and a random part that begins with the process's start time
    where the system tells it (``t<ticks>-``), so that a later process given the same id is told apart from it."""
    started = process_started(os.getpid())
    random_part = f"t{started}-{uuid.uuid4().hex[:6]}" if started is not None else uuid.uuid4().hex[:6]
    return f"{socket.gethostname()}:{os.getpid()}:{random_part}"


class Worker:
    """Carries runs of ``store`` with ``client``'s agent, at most ``capacity`` at a time; runs that never ran take
    at most ``capacity - resume_reserve`` of them (by default capacity // 8 slots are kept for resumed runs)."""

    def __init__(
        self,
        client: AgentClient,
        store: RunStore,
        *,
        name: str | None = None,
        capacity: int = CAPACITY,
        lease_seconds: float = LEASE_SECONDS,
        poll_seconds: float = POLL_SECONDS,
        retention_seconds: float = RETENTION_SECONDS,
        resume_reserve: int | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        reserve = capacity // RESUME_RESERVE_SHARE if resume_reserve is None else resume_reserve
        if not 0 <= reserve < capacity:
            raise ValueError(f"resume_reserve must be at least 0 and below the capacity ({capacity}), not {reserve}")
        self.client = client
        self.agent = client.agent
        self.store = store
        self.name = name or default_name()
        self.capacity = capacity
        self.resume_reserve = reserve
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.retention_seconds = retention_seconds
        # Heartbeats get threads of their own: inbox polls and commits never make them wait for one.
        self._heartbeats = trio.CapacityLimiter(max(2, capacity // 4))
        self.durable = DurableExtension()
        self.history = StoreHistory()
        self.agent.history = self.history
        self.active: dict[str, DurableRun | None] = {}
        # How many carries of each run are under way here: a run claimed again while the segment that parked it
        # still unwinds has two, and stays held until both ended.
        self._carries: collections.Counter[str] = collections.Counter()
        # Set when the newest carry of each session here ended: the session's next one starts after it.
        self._session_ends: dict[str, trio.Event] = {}
        self.wakeups = Wakeups(store)
        self.group_commit = GroupCommit(store)  # the commits of runs ready at once, made in one transaction
        self._slot_freed = trio.Event()
        # The runs whose carry is under way here: one heartbeat renews their leases, one timer flushes their events.
        self._carried: set[DurableRun] = set()
        self._events_waiting = trio.Event()  # set when a carried run's first unwritten event comes
        self._outage = False
        self.draining = False
        self._hurried = False
        self._claiming = trio.CancelScope()
        self.agent.extensions.insert(0, self.durable)
        for hook in ("on_event", "on_tool_call"):
            self.agent.hooks[hook].insert(0, self.durable)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and carry runs until cancelled, or until a drain has handed back every run held. On SQLite it
        first takes over the runs of this machine's carriers that are gone (``take_over_local``)."""
        await self._take_over_local()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._prune)
            nursery.start_soon(self._beat)
            nursery.start_soon(self._flush_when_due)
            task_status.started()
            with self._claiming:
                work = self.wakeups.arm(WORK)
                backlog = True  # runs may wait beyond what the last claim took
                fresh_waiting = False  # new runs were left for the slots kept for resumed ones
                wake_in: float | None = None
                while True:
                    free = self.capacity - len(self.active)
                    if free > 0 and (backlog or work.is_set()):
                        # Armed before the claim: work queued after it still wakes the loop.
                        work = self.wakeups.arm(WORK)
                        told = self.wakeups.mark()  # the claim reads the runs' inboxes: what was told after may be new
                        fresh = max(0, free - self.resume_reserve)
                        try:
                            claim = await trio.to_thread.run_sync(
                                self.store.claim_runs, self.name, self.lease_seconds, free, fresh
                            )
                        except StoreUnavailable as down:
                            self._note_outage(down)
                            await trio.sleep(self.poll_seconds)
                            continue
                        self._note_recovery()
                        for claimed in claim.runs:
                            self.active[claimed.lease.request_id] = None
                            self._carries[claimed.lease.request_id] += 1
                            nursery.start_soon(self._carry, claimed, told, name=f"run {claimed.lease.request_id}")
                        backlog, wake_in = len(claim.runs) == free, claim.wake_in
                        fresh_waiting = claim.fresh_left
                        continue
                    # Full: until a slot frees. Not full and nothing left: until work is queued, the earliest
                    # wake_at of a parked run comes (the process's one expiry timer), or a poll's time.
                    if not await self._until_work(work if free > 0 else None, wake_in if free > 0 else None):
                        backlog = True
                    elif self._slot_freed.is_set() and fresh_waiting:
                        backlog = True  # a new run left for the reserve may take the slot that freed
            await self._until_idle()
            nursery.cancel_scope.cancel()

    async def _take_over_local(self) -> None:
        """End the leases that killed carriers of this machine hold on an SQLite store, so that the first claim
        resumes their runs; a store that cannot be reached leaves them to expire."""
        try:
            taken = await trio.to_thread.run_sync(take_over_local, self.store)
        except StoreUnavailable as down:
            log.warning("worker %s: the runs of stopped carriers are not taken over at once: %s", self.name, down)
            return
        if taken:
            log.warning("worker %s takes over %d runs of stopped carriers of this machine", self.name, len(taken))

    async def _until_work(self, work: Wakeup | None, wake_in: float | None = None) -> bool:
        """Until ``work`` is set (a run may be claimed) or a slot frees; False when poll_seconds, or ``wake_in``
        (seconds until a parked run's wait expires), passed first."""
        self._slot_freed = trio.Event()
        timeout = self.poll_seconds if wake_in is None else max(WAKE_FLOOR_SECONDS, min(self.poll_seconds, wake_in))
        with trio.move_on_after(timeout):
            async with trio.open_nursery() as either:
                for event in (work, self._slot_freed):
                    if event is not None:
                        either.start_soon(_set_then_cancel, event, either.cancel_scope)
            return True
        return False

    async def drain(self, grace_seconds: float = GRACE_SECONDS) -> None:
        """Stop claiming; let each held run finish its step within ``grace_seconds``, then hand every run still
        held back at its last commit, its lease ended at once. Returns once the worker holds no run (``run``
        returns then too)."""
        self.draining = True
        self._claiming.cancel()
        log.warning("worker %s draining: %d runs held, %.0f s of grace", self.name, len(self.active), grace_seconds)
        for durable in list(self.active.values()):
            if durable is not None:
                durable.drain()
        with trio.move_on_after(grace_seconds):
            await self._until_idle()
        self.stop_now()
        await self._until_idle()

    def stop_now(self) -> None:
        """Hand every held run back at once, at its last commit (a drain's grace cut short); claim nothing more."""
        self.draining = self._hurried = True
        self._claiming.cancel()
        for durable in list(self.active.values()):
            if durable is not None:
                durable.hand_back()

    async def _until_idle(self) -> None:
        while self.active:
            await trio.sleep(0.02)

    async def _release(self, durable: DurableRun) -> None:
        """End the lease of a run handed back (another process may claim it at once); an error leaves it to expire."""
        if durable.released:
            return
        durable.released = True
        try:
            with trio.CancelScope(shield=True):
                async with durable.lock:  # after a commit in flight, which then finds the run lost and stops
                    await trio.to_thread.run_sync(self.store.release, durable.lease)
        except StoreError as failed:
            request_id = durable.lease.request_id
            log.warning("run %s not handed back (%s); it is resumed once its lease expires", request_id, failed)
        else:
            log.warning("run %s handed back at its last commit", durable.lease.request_id)

    def _note_outage(self, down: StoreUnavailable) -> None:
        """Say once that the store cannot be reached (the worker keeps asking every poll_seconds)."""
        if not self._outage:
            self._outage = True
            log.warning("worker %s: %s; asking again every %.1f s", self.name, down, self.poll_seconds)

    def _note_recovery(self) -> None:
        if self._outage:
            self._outage = False
            log.warning("worker %s: the store answers again", self.name)

    async def _prune(self) -> None:
        """Delete ended runs past their retention, now and every tenth of it (at most hourly)."""
        while True:
            cutoff = time.time() - self.retention_seconds
            try:
                gone = await trio.to_thread.run_sync(self.store.prune, cutoff)
                await trio.to_thread.run_sync(self.store.forget_pruned, time.time() - TOMBSTONE_SECONDS)
            except StoreUnavailable as down:
                log.warning("worker %s: no runs pruned: %s", self.name, down)
            else:
                if gone:
                    log.info("pruned %d ended runs", gone)
            await trio.sleep(min(self.retention_seconds / 10, 3600.0))

    async def _carry(self, claimed: Claimed, told: int | None = None) -> None:
        """Carry a claimed run once the carry of its session before it here has ended (a run answered while the
        segment that parked it unwinds is claimed again at once), waiting for that at most BUSY_RETRY_SECONDS."""
        lease = claimed.lease
        before = self._session_ends.get(lease.session_id)
        ended = self._session_ends[lease.session_id] = trio.Event()
        try:
            if before is not None:
                with trio.move_on_after(BUSY_RETRY_SECONDS):
                    await before.wait()
            await self._carry_leased(claimed, told)
        except StoreUnavailable as down:
            log.warning("run %s: %s; it is resumed once its lease expires", lease.request_id, down)
        except Exception:
            log.exception("run %s failed in worker %s", lease.request_id, self.name)
        finally:
            ended.set()
            if self._session_ends.get(lease.session_id) is ended:
                del self._session_ends[lease.session_id]
            self._carries[lease.request_id] -= 1
            if not self._carries[lease.request_id]:
                del self._carries[lease.request_id]
                self.active.pop(lease.request_id, None)
            self._slot_freed.set()

    async def _carry_leased(self, claimed: Claimed, told: int | None = None) -> None:
        """Carry a run from its row, history and inbox as the claim read them (its lease is the claim's; ``told``:
        the ``Wakeups.mark`` taken before the claim)."""
        lease, record, history = claimed.lease, claimed.record, list(claimed.history)
        try:
            checkpoint, message = _starting_point(record)
            usage_limits, deadline = stored_bounds(record)
            own = decode_run_settings(record.settings)
            config = AgentRunConfig(
                session_id=lease.session_id,
                request_id=lease.request_id,
                metadata=stored_metadata(record),
                usage_limits=usage_limits,
                deadline=deadline,
                model_settings=own.model_settings,
                output_type=own.output_type,
            )
        except UnreadableCheckpoint as unreadable:
            await self._fail_unreadable(lease, unreadable)
            return
        if lease.cancel_requested:
            await self._cancel_claimed(lease, checkpoint, history)
            return
        durable = DurableRun(
            self.store,
            lease,
            self._deliver,
            input_recorded=checkpoint.input_recorded if checkpoint else False,
            started=checkpoint.started if checkpoint else (),
            waiting=checkpoint.waiting if checkpoint else (),
            phases=checkpoint.phases if checkpoint else {},
            answers=checkpoint.answers if checkpoint else {},
            expired=checkpoint.expired if checkpoint else {},
            group=self.group_commit,
        )
        if record.fingerprint is None:
            durable.fingerprint = self.agent.fingerprint.text()  # the agent that starts it (or first carries it)
        self.active[lease.request_id] = durable
        if self.draining:
            durable.drain()
        if self._hurried:
            durable.hand_back()
        inbox_read = None  # the mark after which a change of the run's inbox is not in what the claim read
        if claimed.inbox is not None and told is not None:
            durable.hold(list(claimed.inbox))
            inbox_read = told
        resume = None
        if checkpoint is not None and checkpoint.input_recorded:
            resume = restored(
                checkpoint, history, worker=self.name, last_seq=lease.last_seq, fingerprint=record.fingerprint
            )
            if checkpoint.plan_mode not in (None, "normal"):
                self._restore_plan_mode(lease.session_id)
        self.history.preload(lease.session_id, history)
        trace_context = record.trace_context
        if trace_context is None:
            trace_context = durable.trace_context = await self._anchor_trace(lease)
        with traced_under(trace_context):  # this segment's spans go under the run's trace
            await self._carry_run(RunStart(lease, durable, config, message, resume, inbox_read))

    async def _anchor_trace(self, lease: Lease) -> dict[str, str] | None:
        """A trace for a run started with no span current, from the first extension that makes one (None if none)."""
        for extension in self.agent.extensions:
            if getattr(extension, "anchor_trace", None) is None:
                continue  # looked at first: a check against the protocol reads every member of the class
            if isinstance(extension, TraceAnchor):
                made = await trio.to_thread.run_sync(extension.anchor_trace, lease.session_id, lease.request_id)
                if made:
                    return made
        return None

    async def _carry_run(self, start: RunStart) -> None:
        """Carry the run holding its session's lock (``RunStore.lock_session``, asked only of a store that shares
        session locks); a session a session store's runner holds (``chat`` on the same SQLite file) gives the run
        back, to be claimed again shortly."""
        lease, held = start.lease, None
        if self.store.shares_session_locks:
            try:
                held = self.store.lock_session(lease.session_id)
            except SessionLocked as locked:
                log.warning("%s; run %s given back", locked, lease.request_id)
                await self._give_back_busy(lease)
                return
        try:
            await self._carry_held(start)
        finally:
            if held is not None:
                held.release()

    async def _give_back_busy(self, lease: Lease) -> None:
        """Give a run back as it was (no checkpoint: the stored one is kept), not to be claimed again at once."""
        give_back = RunCommit(status="queued", retry_after=BUSY_RETRY_SECONDS)
        await trio.to_thread.run_sync(self.store.commit, lease, give_back)

    async def _carry_held(self, start: RunStart) -> None:
        lease, durable = start.lease, start.durable
        try:
            run = await self.agent._open_run(start.config, start.message, durable, start.resume)
        except UnsupportedSetting as refused:
            await self._fail_unreadable(lease, UnreadableCheckpoint(f"its model settings are refused ({refused})"))
            return
        except SessionBusy:
            log.warning("session %s already runs here; run %s given back", lease.session_id, lease.request_id)
            await self._give_back_busy(lease)
            return
        durable.run = run
        self.durable.attach(durable)
        try:
            async with trio.open_nursery() as helpers:
                self._carried.add(durable)
                durable.on_events_waiting = self._wake_flusher
                if durable.events:
                    self._wake_flusher()
                helpers.start_soon(self._poll_inbox, durable, start.inbox_read)
                # A run handed back is released at once, while it unwinds (a thread tool cut off may take a while):
                # nothing of it is written any more, so whoever claims it meanwhile resumes it from its last commit.
                durable.on_hand_back = lambda: helpers.start_soon(self._release, durable)
                if durable.handed_back:
                    helpers.start_soon(self._release, durable)
                with durable.scope:
                    try:
                        await run.run()
                    except BaseException as error:  # the run's end is in its events; the worker goes on
                        if not isinstance(error, (Exception, trio.Cancelled)):
                            raise
                helpers.cancel_scope.cancel()
        finally:
            durable.on_hand_back = None
            durable.on_events_waiting = None
            self._carried.discard(durable)
            self.durable.detach(durable)
            self.agent._close_run(run)
            durable.run = None  # the run refers to its sink, the durable run: no cycle is left for the collector
            if durable.handed_back:
                await self._release(durable)

    async def _cancel_claimed(self, lease: Lease, checkpoint: Checkpoint | None, history: list[Message]) -> None:
        """End a run claimed with its cancel flag set instead of resuming it: a cancelled result for each
        open call, then run_cancelled, in one fenced commit."""
        log.info("run %s was cancelled while nobody ran it; it ends cancelled", lease.request_id)
        event = RunCancelledEvent(
            session_id=lease.session_id, request_id=lease.request_id, seq=lease.last_seq + 1, ts=time.time()
        )
        stored = StoredEvent(lease.request_id, event.seq, event.name, encode_event(event))
        results = tuple(cancelled_results(checkpoint, history))
        await trio.to_thread.run_sync(
            self.store.commit, lease, RunCommit(messages=results, events=(stored,), status="cancelled")
        )

    async def _fail_unreadable(self, lease: Lease, unreadable: UnreadableCheckpoint) -> None:
        """End a run that cannot be resumed as failed, once, with a run_failed event saying why.

        A log that does not take the event still gets the status: the run is never claimed again.
        """
        log.error("run %s: %s; it is marked failed", lease.request_id, unreadable)
        event = RunFailedEvent(
            session_id=lease.session_id,
            request_id=lease.request_id,
            seq=lease.last_seq + 1,
            ts=time.time(),
            error=unreadable,
        )
        stored = StoredEvent(lease.request_id, event.seq, event.name, encode_event(event))
        try:
            await trio.to_thread.run_sync(self.store.commit, lease, RunCommit(events=(stored,), status="failed"))
        except (LeaseLost, StoreUnavailable):
            raise
        except StoreError as refused:
            log.error("run %s: its failure event was not written (%s); failing it without", lease.request_id, refused)
            await trio.to_thread.run_sync(self.store.commit, lease, RunCommit(status="failed"))

    def _restore_plan_mode(self, session_id: str) -> None:
        from orchestrator.extensions.plan_mode import PlanModeExtension

        for extension in self.agent.extensions:
            if isinstance(extension, PlanModeExtension):
                extension.restore_plan_mode(session_id)

    def _deliver(self, event: ExternalEvent, config: AgentRunConfig) -> bool:
        return bool(self.agent.deliver(event, config=config))

    async def _beat(self) -> None:
        """Every ``lease_seconds / 3``, renew the lease of each run carried here (each as long as its carry is under
        way, also while a thread tool cut off unwinds): one timer for the process, not one per run."""
        while True:
            await trio.sleep(self.lease_seconds / 3)
            carried = [durable for durable in self._carried if not durable.lost]
            if carried:
                async with trio.open_nursery() as beats:
                    for durable in carried:
                        beats.start_soon(self._renew, durable)

    async def _renew(self, durable: DurableRun) -> None:
        try:
            with trio.CancelScope(shield=True):
                renewed = await trio.to_thread.run_sync(
                    self.store.renew, durable.lease, self.lease_seconds, limiter=self._heartbeats
                )
        except LeaseLost as lost:
            if durable in self._carried:  # not a run that ended meanwhile (its end let the lease go)
                log.warning("%s", lost)
                durable.lose()
            return
        except StoreUnavailable as down:
            # The next beat tries again; a lease that expired meanwhile is LeaseLost then.
            log.warning("run %s: lease not renewed: %s", durable.lease.request_id, down)
            return
        except Exception:  # the run stops here; the other runs' leases are renewed as before
            log.exception("run %s: renewing its lease failed; it stops here", durable.lease.request_id)
            durable.lose()
            return
        if durable not in self._carried or durable.lost:
            return
        # A commit may have moved the version meanwhile: keep its lease, take the new expiry.
        durable.lease = attrs.evolve(durable.lease, expires=renewed.expires, cancel_requested=renewed.cancel_requested)
        if durable.lease.cancel_requested and durable.run is not None:
            # The run ends cancelled; the lease is kept renewed until it has (a thread tool may outlast it).
            durable.scope.cancel()

    def _wake_flusher(self) -> None:
        self._events_waiting.set()

    async def _flush_when_due(self) -> None:
        """Commit the streamed events of each carried run once the oldest of them has waited ``FLUSH_SECONDS``
        (a commit made sooner takes them along, so events that a commit follows at once cost no transaction of
        their own): one timer for the process, not one per run."""
        async with trio.open_nursery() as flushes:
            while True:
                await self._events_waiting.wait()
                self._events_waiting = trio.Event()
                while True:
                    waiting = [durable for durable in self._carried if durable.events and not durable.lost]
                    if not waiting:
                        break
                    now = time.monotonic()
                    for durable in waiting:
                        if now - durable.pending_since >= FLUSH_SECONDS and not durable.flushing:
                            durable.flushing = True
                            flushes.start_soon(self._flush, durable)
                    later = [durable.pending_since for durable in waiting if not durable.flushing]
                    await trio.sleep(max(0.0, min(later) + FLUSH_SECONDS - now) if later else FLUSH_SECONDS)

    @staticmethod
    async def _flush(durable: DurableRun) -> None:
        try:
            await durable.flush()
        except Exception:  # the run stops here, as its own failing commit would stop it; the other runs go on
            log.exception("run %s: its streamed events could not be written; it stops here", durable.lease.request_id)
            durable.lose()
        finally:
            durable.flushing = False
            if durable.events:  # not flushed (the run ends, or the commit failed): looked at again later
                durable.pending_since = time.monotonic()

    async def _poll_inbox(self, durable: DurableRun, read_since: int | None = None) -> None:
        """Read the run's inbox when it changes (or every INBOX_SECONDS) and offer what is new; an answer held
        back (for a resumed call that has not asked again) is offered again from memory every 0.1 s.

        ``read_since``: the claim read the inbox (its items are held), and a change told after this
        ``Wakeups.mark`` may be missing from what it read: the first read is made only if one was.
        """
        read_at: float | None = None  # when the inbox was last read (trio clock); None: read it now
        if read_since is not None:
            read_at = trio.current_time()
        request_id = durable.lease.request_id
        try:
            while True:
                woken = self.wakeups.arm(INBOX, request_id)  # before the read: a later post wakes it
                if read_since is not None and self.wakeups.changed_since(read_since, INBOX, request_id):
                    read_at = None
                read_since = None
                if read_at is None or trio.current_time() - read_at >= INBOX_SECONDS:
                    read_at = trio.current_time()
                    try:
                        items = await trio.to_thread.run_sync(
                            lambda: self.store.inbox(request_id, after_id=durable.seen_inbox)
                        )
                    except StoreUnavailable:
                        items = []  # asked again at the next poll
                    durable.hold(items)
                durable.offer_held()
                with trio.move_on_after(0.1 if durable.held else INBOX_SECONDS):
                    await woken.wait()
                if woken.is_set():
                    read_at = None
        finally:
            self.wakeups.forget(INBOX, request_id)  # nothing here waits for this run's inbox any more


def stored_metadata(record: RunRecord) -> dict[str, Any]:
    """The run's ``AgentRunConfig.metadata``, kept in its input row beside the message (``"metadata"``).

    The agent's ``deps_factory`` makes the resumed run's deps from it; UnreadableCheckpoint when it is not
    a JSON object the config takes.
    """
    stored = record.input.get("metadata", {})
    try:
        return dict(AgentRunConfig(metadata=stored).metadata)
    except (TypeError, ValueError) as bad:
        raise UnreadableCheckpoint(f"its metadata is unusable ({bad})") from None


def stored_bounds(record: RunRecord) -> tuple[UsageLimits | None, float | None]:
    """The run's usage limits and deadline (seconds), kept in its input row (``"limits"``, ``"deadline"``).

    Each process that carries the run applies them from its start there (a resumed run counts afresh);
    UnreadableCheckpoint when either is unusable.
    """
    limits, deadline = record.input.get("limits"), record.input.get("deadline")
    try:
        usage_limits = None if limits is None else usage_limits_from_json(limits)
        number(above=0, optional=True).check("its deadline", deadline)
    except (TypeError, ValueError) as bad:
        raise UnreadableCheckpoint(f"its bounds are unusable ({bad})") from None
    return usage_limits, None if deadline is None else float(deadline)


async def _set_then_cancel(event: Wakeup | trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _starting_point(record: RunRecord) -> tuple[Checkpoint | None, UserMessage | None]:
    """The run's checkpoint, and its input when it was never recorded; UnreadableCheckpoint when either is unusable."""
    if record.unreadable is not None:
        raise UnreadableCheckpoint(record.unreadable)
    checkpoint = read(record.checkpoint)
    if checkpoint is not None and checkpoint.input_recorded:
        return checkpoint, None
    try:
        message = decode_message(dict(record.input))
    except WireFormatError as error:
        raise UnreadableCheckpoint(f"its input is not a message ({error})") from None
    if not isinstance(message, UserMessage):
        raise UnreadableCheckpoint(f"its input is a {message.role} message, not a user message")
    return checkpoint, message

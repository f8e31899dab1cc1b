"""DurableRun: one claimed run's link to the run store, and the extension that keeps it current.

Everything the run does reaches the store through ``commit``, fenced by the
worker's lease and serialised by a lock (the commits of a worker's runs that are
ready at once go in one transaction, each fenced alone: ``GroupCommit``): messages (appended to the session's
history), the streamed events (numbered, in order), the checkpoint, the inbox
items consumed. A commit happens before the request goes on whenever a message
is appended (the input, each tool result, steering; a model response, and the
result of an idempotent tool's call, go with the commit that follows them, made
before anything the response asks for is done),
before a tool body is entered (recording the call's intent with it), when a
call starts to wait for an answer while the run goes on, and when the run ends
or parks (a run that parks as its only call starts to wait records the wait in
that one commit); streamed events between those are written by the next commit,
or by the worker's flush once the oldest has waited ``FLUSH_SECONDS``.

The checkpoint keeps each open call's phase (``checkpoint.PHASES``). An answer
taken from the inbox moves its call to ``answered`` in the same moment it is
marked consumed, so every commit that consumes it records the phase too; the
commit made before a tool body is entered records ``executing``. A resumed run
therefore never asks a person again for an answer it consumed, and never runs
again a call whose body was entered: that call gets ``STOPPED_MID_CALL``
unless its tool is idempotent. A call of an idempotent tool makes no commit of
its own (unless an answer was consumed for it before its body): its start, the
answer it takes and its result go with the run's next commit, and a run stopped
before that runs it again.

A lost lease (another worker took the run) makes every later commit a no-op
and cancels the run: nothing of it is written twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from orchestrator import wire
from orchestrator.cluster.checkpoint import Checkpoint, Waiting, expired_reason
from orchestrator.cluster.group_commit import GroupCommit
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.events import AgentEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.steering import STEERING_EVENT
from orchestrator.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from orchestrator.runtime.context import AgentRunContext
from orchestrator.store.errors import StoreUnavailable
from orchestrator.store.runs import InboxItem, Lease, LeaseLost, RunCommit, RunStore, StoredEvent
from orchestrator.tools import ToolResult

log = logging.getLogger("orchestrator.cluster")

FLUSH_SECONDS = 0.1
EXPIRY_HOLD_SECONDS = 2.0
"""A run whose wait expires within this long is not parked: its carrier keeps it and the wait's timer fires
(also what a resumed run whose wait has expired does, and room for clocks a little apart)."""
#: Pauses before each new try of a commit the store could not take (well inside a lease).
COMMIT_RETRY_SECONDS = (0.2, 1.0, 2.0)
STOPPED_MID_CALL = (
    "not run again: the worker running this call stopped before it finished, so it may or may not have"
    " taken effect; check before calling it again"
)
_FINAL_EVENTS = {"run_completed": "completed", "run_failed": "failed", "run_cancelled": "cancelled"}
_FINAL_STATUSES = frozenset(_FINAL_EVENTS.values())
_SETTLED_EVENTS = frozenset({"tool_completed", "tool_failed", "tool_skipped", "tool_cancelled"})


class DurableRun:
    """A claimed run: its lease, what waits to be committed, and what the checkpoint records."""

    def __init__(
        self,
        store: RunStore,
        lease: Lease,
        deliver: Callable[[ExternalEvent, AgentRunConfig], bool],
        *,
        input_recorded: bool = False,
        started: tuple[str, ...] = (),
        waiting: tuple[Waiting, ...] = (),
        phases: Mapping[str, str] | None = None,
        answers: Mapping[str, Mapping[str, Any]] | None = None,
        expired: Mapping[str, str] | None = None,
        group: GroupCommit | None = None,
    ) -> None:
        self.store = store
        self.group = group  # the carrier's commits made together (None: each commit alone)
        self.lease = lease
        self._deliver = deliver
        self.config = AgentRunConfig(session_id=lease.session_id, request_id=lease.request_id)
        self.lock = trio.Lock()
        self.events: list[StoredEvent] = []
        self.pending_since = 0.0  # when the oldest event not yet committed came (time.monotonic)
        # Called when an event comes while none waited (the carrier's flush timer), and whether a flush is under way.
        self.on_events_waiting: Callable[[], None] | None = None
        self.flushing = False
        self.messages: list[Message] = []
        self.history: tuple[Message, ...] | None = None  # a compaction's replacement, written by the next commit
        self.consumed: list[int] = []  # inbox items used up since the last commit
        # Every inbox item this process used up: a look at the inbox that began before the commit
        # marking one consumed may still return it, and it must not be offered (or consumed) twice.
        self.used: set[int] = set()
        self.input_recorded = input_recorded
        # Each open call's ledger phase, and the answers consumed for calls without a result.
        self.phases: dict[str, str] = dict(phases or {})
        self.answers: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (answers or {}).items()}
        # Calls whose wait expired, with why a late answer to each is refused (kept while the run lasts).
        self.expired: dict[str, str] = dict(expired or {})
        waiting_ids = {w.tool_call_id for w in waiting}
        # Calls of an earlier process cut off mid-way (their body was entered): not run blindly again.
        # A checkpoint written before the ledger knows only intents: each one not waiting counts as cut off.
        if phases is None:
            self.stopped_mid_call = set(started) - waiting_ids
        else:
            self.stopped_mid_call = {c for c in started if self.phases.get(c) == "executing"}
        self.started: set[str] = set(started)
        self.waiting: dict[str, Waiting] = {w.tool_call_id: w for w in waiting}
        # Waits of an earlier process whose question was not asked again yet: their answers must wait.
        self.expected = {c for c in waiting_ids if self.phases.get(c, "waiting") == "waiting"}
        # Waiting calls whose answer was delivered (the call goes on; nothing to park for).
        self.answered: set[str] = set()
        self.run: Any = None  # the RequestRun, once made
        self.scope = trio.CancelScope()
        self.lost = False
        self.parked = False
        # A drain asked this run to stop at its next step boundary (a commit with a checkpoint), then be handed back.
        self.draining = False
        self.handed_back = False
        # Called once when the run is handed back, so that its carrier releases the lease at once (None: no carrier
        # listens yet, and it looks at ``handed_back`` when it starts to).
        self.on_hand_back: Callable[[], None] | None = None
        self.released = False
        # Calls whose body was entered here and whose result message is not committed yet.
        self.unrecorded: set[str] = set()
        # Calls of idempotent tools running here: an answer one takes goes with its next commit, not one of its own.
        self.idempotent: set[str] = set()
        self.seen_inbox = 0  # the highest inbox item id read so far
        # Items read and held back (answers for resumed calls that have not asked again), by id: offered again
        # from memory, and looked at first by the call that asks.
        self.held: dict[int, InboxItem] = {}
        # Steering taken from the inbox and not yet in the history, oldest first: (item id, its text). Each item
        # is consumed by the commit that appends its message, so a run stopped before that takes it again.
        self.steering: list[tuple[int, str]] = []
        # Questions of subagents that wait, by (child session, call id): never resumed (the children are not).
        self.children: dict[tuple[str, str], Waiting] = {}
        # A trace context made for the run here (it had none): stored with the next commit, where none is yet.
        self.trace_context: Mapping[str, str] | None = None
        # The carrying agent's fingerprint (JSON text), to be stored by the next commit (None: nothing to store).
        self.fingerprint: str | None = None

    # the sink of the run's streamed events ----------------------------------

    def offer(self, event: AgentEvent) -> bool:
        if not self.events:
            self.pending_since = time.monotonic()
            if self.on_events_waiting is not None:
                self.on_events_waiting()
        self.events.append(StoredEvent(self.lease.request_id, event.seq, event.name, wire.encode_event(event)))
        if event.session_id != self.lease.session_id:
            self._child_event(event)
        return True

    def _child_event(self, event: AgentEvent) -> None:
        """Keep the questions of the run's subagents that wait, so any web node lists and checks their answers."""
        if _is_question(event):
            payload = wire.json_value(dict(event.payload))
            call_id = str(event.payload["tool_call_id"])
            response = str(event.payload["response_event"])
            child = event.session_id
            self.children[(child, call_id)] = Waiting(call_id, event.name, payload, response, session_id=child)
        elif event.name in _SETTLED_EVENTS:
            self.children.pop((event.session_id, event.payload["call"].id), None)
        elif event.name in _FINAL_EVENTS:
            for key in [key for key in self.children if key[0] == event.session_id]:
                del self.children[key]

    async def put(self, event: AgentEvent) -> None:
        self.offer(event)

    # writing -----------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        run = self.run
        plan_mode = None
        if run is not None:
            for extension in run.agent.extensions:
                if isinstance(extension, PlanModeExtension):
                    plan_mode = extension.mode(self.lease.session_id)
        return Checkpoint(
            states=run.machine.states if run is not None else {},
            iterations=run.iterations if run is not None else 0,
            input_recorded=self.input_recorded,
            started=tuple(sorted(self.started)),
            waiting=tuple(self.waiting.values()),
            plan_mode=plan_mode,
            stop_reason=run.stop_reason if run is not None else "end_turn",
            phases=dict(self.phases),
            answers=dict(self.answers),
            expired=dict(self.expired),
            spent=run.budget.report() if run is not None and run.budget is not None else None,
            deadline_left=run.deadline.left() if run is not None and run.deadline is not None else None,
            children=tuple(self.children.values()),
        )

    async def commit(self, status: str = "running", *, boundary: bool = True) -> None:
        """Write what is pending (and the checkpoint) in one fenced transaction.

        While draining, a commit at a step ``boundary`` that keeps the run running, with no call body still
        running, is its last: the run stops there and is handed back (streamed text flushed between steps
        is no boundary).
        """
        async with self.lock:
            if self.lost:
                return
            events, kept_back = self._writable(status)
            change = RunCommit(
                messages=tuple(self.messages),
                events=events,
                checkpoint=self.checkpoint().json(),
                consumed=tuple(self.consumed),
                status=status,
                history=self.history,
                wake_at=self.wake_at() if status == "parked" else None,
                trace_context=self.trace_context,
                fingerprint=self.fingerprint,
            )
            self.messages, self.events, self.consumed, self.history = [], kept_back, [], None
            self.fingerprint = None
            try:
                with trio.CancelScope(shield=True):
                    self.lease = await self._committed(change)
                self.trace_context = None
            except LeaseLost as lost:
                log.warning("%s; the run stops here without writing more", lost)
                self.lose()
            except StoreUnavailable as down:
                # Not a failure of the run: it stops here, and whoever claims it once the lease
                # expires resumes it from its last commit (this worker too, once the store is back).
                log.warning("run %s: %s; the run stops here until its lease expires", self.lease.request_id, down)
                self.lose()
            except BaseException:
                # Nothing was written: keep it for the next commit (the run's failure is committed with it).
                self.messages[:0] = change.messages
                if change.events and not self.events and self.on_events_waiting is not None:
                    self.on_events_waiting()
                self.events[:0] = change.events
                self.consumed[:0] = change.consumed
                if self.history is None:
                    self.history = change.history
                self.fingerprint = self.fingerprint or change.fingerprint
                raise
            if self.draining and boundary and status == "running" and not self.unrecorded:
                self.hand_back()  # every call body entered here has its result committed

    async def _committed(self, change: RunCommit) -> Lease:
        """``store.commit``, tried again while the store cannot be reached (COMMIT_RETRY_SECONDS apart).

        Commits are fenced: one whose answer was lost but which was made fails its
        retry with LeaseLost (the version moved), and the run stops here; another
        worker resumes it from that commit once the lease expires.
        """
        for pause in COMMIT_RETRY_SECONDS:
            try:
                return await self._commit_once(change)
            except StoreUnavailable as down:
                log.warning("run %s: commit not made (%s); trying again in %.2f s", self.lease.request_id, down, pause)
                await trio.sleep(pause)
        return await self._commit_once(change)

    async def _commit_once(self, change: RunCommit) -> Lease:
        if self.group is not None:
            return await self.group.commit(self.lease, change)
        return await trio.to_thread.run_sync(self.store.commit, self.lease, change)

    async def flush(self) -> None:
        """Commit streamed events that wait (text deltas between other commits); not the run's own terminal event
        (see ``_writable``)."""
        if self.events and not self.lost and not self._ending():
            await self.commit(boundary=False)

    def _writable(self, status: str) -> tuple[tuple[StoredEvent, ...], list[StoredEvent]]:
        """The pending events a commit with ``status`` writes, and those it leaves pending.

        Only the commit that ends the run writes the run's own terminal event (and what follows it), with the
        final status: no reader sees the run ended in its log while its row still says it runs. Decided under
        the commit lock, when the events are taken: the run may offer its end while a flush waits for the lock.
        """
        if status not in _FINAL_STATUSES:
            for index, event in enumerate(self.events):
                if self._own_terminal(event):
                    return tuple(self.events[:index]), self.events[index:]
        return tuple(self.events), []

    def _ending(self) -> bool:
        return any(self._own_terminal(event) for event in self.events)

    def _own_terminal(self, event: StoredEvent) -> bool:
        session_id = self.lease.session_id
        return event.type in _FINAL_EVENTS and event.body.get("session_id", session_id) == session_id

    def lose(self) -> None:
        self.lost = True
        self.scope.cancel()

    def drain(self) -> None:
        """Stop at the next step boundary (the step running now finishes and is committed), then be handed back."""
        self.draining = True

    def hand_back(self) -> None:
        """Stop now, writing nothing more: the run goes back at its last commit (the carrier then releases it)."""
        if not self.lost:
            self.handed_back = True
            if self.on_hand_back is not None:
                self.on_hand_back()
        self.lost = True
        self.scope.cancel()

    # the inbox ---------------------------------------------------------------

    def hold(self, items: list[InboxItem]) -> None:
        """Keep items just read from the inbox until they are used up (``offer_held``)."""
        for item in items:
            self.seen_inbox = max(self.seen_inbox, item.id)
            if item.id not in self.used:
                self.held[item.id] = item

    def offer_held(self) -> None:
        """Offer the items held, oldest first; those used up are let go."""
        for item_id in sorted(self.held):
            if self.offer_item(self.held[item_id]):
                del self.held[item_id]

    def offer_item(self, item: InboxItem) -> bool:
        """Deliver an inbox item to the run's extensions; whether it was used up (accepted, or refused for good)."""
        if item.id in self.used:
            return True
        call_id = item.payload.get("tool_call_id") if isinstance(item.payload, Mapping) else None
        if item.name == STEERING_EVENT:
            return self._offer_steering(item)
        if item.session_id != self.lease.session_id:
            return self._offer_to_child(item)
        if self._deliver(ExternalEvent(item.name, dict(item.payload)), self.config):
            # Consumed and answered together: whichever commit consumes the item records the phase.
            self._use(item)
            if isinstance(call_id, str):
                self.answered.add(call_id)
                if call_id in self.waiting:
                    self.phases[call_id] = "answered"
                    self.answers[call_id] = dict(item.payload)
            return True
        if call_id in self.expected:
            return False  # the resumed call has not asked again yet
        log.warning("inbox item %s (%s) of run %s refused; dropped", item.id, item.name, self.lease.request_id)
        self._use(item)
        return True

    def _offer_steering(self, item: InboxItem) -> bool:
        """Deliver a steering message; it stays unconsumed until the commit that appends it (``steering_appended``)."""
        content = item.payload.get("content") if isinstance(item.payload, Mapping) else None
        self.used.add(item.id)
        if self._deliver(ExternalEvent(item.name, dict(item.payload)), self.config):
            self.steering.append((item.id, content if isinstance(content, str) else ""))
            return True
        log.warning("steering item %s of run %s refused; dropped", item.id, self.lease.request_id)
        self.consumed.append(item.id)
        return True

    def _offer_to_child(self, item: InboxItem) -> bool:
        """An answer for a subagent's question: delivered in the child's session (the run's agent routes it)."""
        self._use(item)
        if self._deliver(ExternalEvent(item.name, dict(item.payload)), AgentRunConfig(session_id=item.session_id)):
            call_id = item.payload.get("tool_call_id") if isinstance(item.payload, Mapping) else None
            self.children.pop((item.session_id, str(call_id)), None)
        else:
            log.warning("inbox item %s for subagent session %s refused; dropped", item.id, item.session_id)
        return True

    def steering_appended(self, message: UserMessage) -> None:
        """A user message joined the history: the oldest steering item with its text is consumed in this commit."""
        for index, (item_id, content) in enumerate(self.steering):
            if message.text.strip() == content.strip():
                del self.steering[index]
                self.consumed.append(item_id)
                return

    def redeliver(self, waiting: Waiting, answer: Mapping[str, Any]) -> bool:
        """Give ``waiting`` the answer its call consumed in an earlier process; whether it took it."""
        if not self._deliver(ExternalEvent(waiting.response_event, dict(answer)), self.config):
            log.warning("run %s: call %s refused its stored answer", self.lease.request_id, waiting.tool_call_id)
            return False
        self.answered.add(waiting.tool_call_id)
        return True

    def _use(self, item: InboxItem) -> None:
        self.used.add(item.id)
        self.consumed.append(item.id)

    async def take_answer(self, waiting: Waiting, *, read: bool = True) -> bool:
        """Answer ``waiting`` from the inbox if its answer is there; whether it was. Steering found there is taken.

        A store that cannot be reached has no answer now: the run parks, and an answer
        already in its inbox makes it runnable again at once. An answer the inbox reader read and held back
        is taken from memory, without reading the inbox again; ``read=False`` looks only there.
        """
        for item_id in sorted(self.held):
            item = self.held[item_id]
            answers = item.name == waiting.response_event and item.payload.get("tool_call_id") == waiting.tool_call_id
            if answers and self.offer_item(item):
                del self.held[item_id]
                return True
        if not read:
            return False
        try:
            items = await trio.to_thread.run_sync(self.store.inbox, self.lease.request_id)
        except StoreUnavailable as down:
            log.warning("run %s: inbox not read (%s)", self.lease.request_id, down)
            return False
        for item in items:
            if item.id in self.used:
                continue
            if item.name == STEERING_EVENT:
                # Taken now, as the inbox reader would: the run is held for it instead of parking (and being
                # made runnable again at once by the very item it did not take).
                self.offer_item(item)
                continue
            answers = item.name == waiting.response_event and item.payload.get("tool_call_id") == waiting.tool_call_id
            if answers and self.offer_item(item):
                return True
        return False

    # parking -----------------------------------------------------------------

    def running_calls(self) -> set[str]:
        """Calls started and neither settled nor waiting unanswered."""
        return self.started - self.unanswered()

    def settled(self, call_id: str) -> None:
        """``call_id`` has its result: neither running nor waiting any more (an answer to it is dropped)."""
        self.started.discard(call_id)
        self.expected.discard(call_id)
        self.waiting.pop(call_id, None)
        self.answered.discard(call_id)
        self.phases.pop(call_id, None)
        self.answers.pop(call_id, None)
        self.idempotent.discard(call_id)

    def unanswered(self) -> set[str]:
        return set(self.waiting) - self.answered

    def wake_at(self) -> float | None:
        """The earliest expiry of the waits not answered yet: when a parked run is to be taken up again."""
        expiries = [w.expires_at for c, w in self.waiting.items() if c not in self.answered and w.expires_at]
        return min(expiries) if expiries else None

    def may_park(self) -> bool:
        """Whether all the run does is wait: every open call waits for an answer not yet given."""
        run = self.run
        if run is None or not self.unanswered() or self.running_calls() or self.lost or self.parked:
            return False
        if run.steering is not None or self.steering or not run.machine.may("park"):
            return False  # steering taken: it is applied as the next turn, once the waiting calls have their results
        wake_at = self.wake_at()
        # A wait that expires (or expired) about now: the run stays held, and the wait's own timer fires.
        return wake_at is None or wake_at - time.time() >= EXPIRY_HOLD_SECONDS

    def park_if_idle(self) -> None:
        """Let the run go when all it does is wait (``may_park``)."""
        if not self.may_park():
            return
        run = self.run
        self.parked = True
        run.parking = True
        self.scope.cancel()


_FIELDS_PAYLOAD = AgentEvent.__dict__["payload"]  # the payload of an event whose payload is its fields


def _is_question(event: AgentEvent) -> bool:
    if type(event).payload is not _FIELDS_PAYLOAD:
        payload = event.payload
        return isinstance(payload.get("tool_call_id"), str) and isinstance(payload.get("response_event"), str)
    # An event's payload is its fields: read the two without building the payload of every event.
    call_id, response = getattr(event, "tool_call_id", None), getattr(event, "response_event", None)
    return isinstance(call_id, str) and isinstance(response, str)


class DurableExtension(AgentExtension):
    """Keeps each DurableRun of a worker's agent current: commits, intents, waits, parking."""

    priority = -1000  # before other extensions: nothing happens before it is recorded
    fingerprinted = False  # where the agent runs, not what it is

    def __init__(self) -> None:
        self._runs: dict[str, DurableRun] = {}

    def attach(self, durable: DurableRun) -> None:
        self._runs[durable.lease.request_id] = durable

    def detach(self, durable: DurableRun) -> None:
        self._runs.pop(durable.lease.request_id, None)

    def _durable(self, context: AgentRunContext) -> DurableRun | None:
        return self._runs.get(context.request_id)

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        durable = self._durable(context)
        if durable is None:
            return
        name = event.name
        if name == "message_appended":
            message = event.payload["message"]
            durable.messages.append(message)
            if isinstance(message, UserMessage) and durable.steering:
                durable.steering_appended(message)
            rerunnable = False  # the result of a call that may run again
            if isinstance(message, ToolMessage):
                rerunnable = message.tool_call_id in durable.idempotent
                durable.unrecorded.discard(message.tool_call_id)
                # The result is recorded with this message: the call is no longer an intent without a result,
                # even if the worker stops before its settled event is committed.
                durable.settled(message.tool_call_id)
            the_input = context.states.get("phase") == "setup"
            if the_input:
                durable.input_recorded = True
            if (isinstance(message, AssistantMessage) or rerunnable or the_input) and not durable.draining:
                # Taken along by the next commit, which comes before anything the response asks for is done
                # (a call's body, a question, the run's end), or by the flush of the events streamed meanwhile:
                # a run stopped before that starts again from its input (stored with the run), asks the model
                # again, and runs again the idempotent calls whose results it had not committed.
                return
            await durable.commit()
        elif name == "tool_started":
            # Recorded by the next commit: the one made before its body is entered (or its question, or its
            # result), with nothing done outside the process in between.
            durable.started.add(event.payload["call"].id)
        elif name in _SETTLED_EVENTS:
            durable.settled(event.payload["call"].id)
            durable.park_if_idle()
        elif name in _FINAL_EVENTS:
            await durable.commit(_FINAL_EVENTS[name])
        elif name == "run_parked":
            await durable.commit("parked")
        elif name == "history_replaced":
            # A compaction: the replacement holds every message so far, those not committed yet included.
            durable.history = tuple(event.payload["messages"])
            durable.messages = []
            await durable.commit()
        elif name == "wait_expired":
            call_id = str(event.payload["tool_call_id"])
            durable.expired[call_id] = expired_reason(call_id, float(event.payload["expires_at"]))
        elif name == "agent_changed" and event.payload["outcome"] == "continued":
            # The run goes on under this agent: later resumes compare with it.
            durable.fingerprint = durable.run.agent.fingerprint.text()
        elif _is_question(event):
            await self.question_asked(context, event)

    async def question_asked(self, context: AgentRunContext, event: AgentEvent) -> None:
        """A call waits for an answer: record it, answer it from the inbox, or park the run."""
        durable = self._durable(context)
        if durable is None:
            return
        payload = wire.json_value(dict(event.payload))
        call_id = str(event.payload["tool_call_id"])
        expires_at = durable.run.agent.waiting.expiry(context.session_id, call_id) if durable.run else None
        waiting = Waiting(call_id, event.name, payload, str(event.payload["response_event"]), expires_at)
        durable.waiting[call_id] = waiting
        resumed = call_id in durable.expected  # asked again: its answer may have come while nobody held the run
        durable.expected.discard(call_id)
        stored = durable.answers.get(call_id)
        # Asked again after a resume: the answer it consumed before is given, no person is asked.
        if stored is not None and call_id not in durable.answered and durable.redeliver(waiting, stored):
            return
        durable.phases[call_id] = "waiting"
        if call_id not in durable.answered and durable.may_park():
            # All the run does is wait: the commit that parks it records the wait, unless the answer is in the
            # inbox already (an answer posted meanwhile makes the parked run runnable in that same commit). A
            # question asked for the first time is not in anyone's list yet: nothing answers it but what the
            # inbox reader holds.
            if not await durable.take_answer(waiting, read=resumed):
                durable.park_if_idle()
            if durable.parked or (call_id in durable.answered and call_id in durable.idempotent):
                # Answered, an idempotent call goes on: its next commit records the answer taken (a run stopped
                # before that asks again, and the answer, still in the inbox, answers it).
                return
            await durable.commit()
            return
        await durable.commit()
        if call_id not in durable.answered and not await durable.take_answer(waiting):
            durable.park_if_idle()

    async def on_tool_call(
        self, context: AgentRunContext, call: ToolCall, call_next: Callable[[ToolCall], Awaitable[ToolResult]]
    ) -> ToolResult:
        durable = self._durable(context)
        if durable is None:
            return await call_next(call)
        if call.id in durable.stopped_mid_call:
            durable.stopped_mid_call.discard(call.id)
            definition = context.tools.get(call.name)
            if definition is None or not getattr(definition, "idempotent", False):
                return ToolResult(STOPPED_MID_CALL, "failed")
        if durable.draining and not durable.unrecorded:
            # A drain starts no new step (calls of the step running go on): the process resuming the run runs it,
            # from the model's response when one waits to be committed (that commit hands the run back).
            if durable.messages:
                await durable.commit()
            durable.hand_back()
            await trio.lowlevel.checkpoint()
            return ToolResult(STOPPED_MID_CALL, "failed")
        # The body is entered only once the ledger says so (with any answer it consumed): a run resumed
        # after this commit never runs the call again. An idempotent tool may run again, so its body needs no
        # commit of its own unless an answer was consumed for it: the call's next commit records it.
        durable.phases[call.id] = "executing"
        durable.unrecorded.add(call.id)
        definition = context.tools.get(call.name)
        if getattr(definition, "idempotent", False):
            durable.idempotent.add(call.id)
        if durable.consumed or call.id not in durable.idempotent:
            await durable.commit()
        if durable.lost:
            await trio.lowlevel.checkpoint()  # the run is being cancelled: the body is not entered
            return ToolResult(STOPPED_MID_CALL, "failed")
        return await call_next(call)

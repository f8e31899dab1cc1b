"""``StoreBackend``: what a web node serves. It talks only to the run store; workers carry the runs.

It serves under trio (hypercorn's trio worker) and under asyncio (uvicorn, hypercorn's
asyncio worker) alike: its waits are anyio's and its store calls run in threads.

Starting a run inserts a ``queued`` row (one active run per session across the
deployment: a second is SessionBusy, a 409). Events are read from the run's
log after ``Last-Event-ID`` and followed through the store's wake-ups (one
listener per process; see ``Wakeups``): an idle follower costs the store nothing,
and the followers of one run share one read per change, so any node serves any
run. An answer is checked like a live one against the question its run's
checkpoint says is waiting (the same ``WaitRule`` validators the extensions
use) in the one transaction that inserts it into the run's inbox and wakes a
parked run, so a worker's commit cannot come between (an answer after the wait's
stored expiry is refused saying so, whether or not a worker took its default yet); a call takes one answer
(a second is refused while the first waits), and an idempotency key makes a
retried POST harmless on any node, even one raced with its first try.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import anyio
import anyio.to_thread

from machines.build import Step
from machines.request import REQUEST
from orchestrator import wire
from orchestrator.cluster.checkpoint import UnreadableCheckpoint, Waiting, cancelled_results, expired_reason, read
from orchestrator.cluster.run_settings import decode_run_settings, encode_run_settings
from orchestrator.cluster.wakeups import Wakeups
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Delivery
from orchestrator.errors import SessionBusy
from orchestrator.events import AgentEvent, RunCancelledEvent, RunCompletedEvent
from orchestrator.extensions.session_store import DEFAULT_WAIT_RULES
from orchestrator.extensions.steering import STEERING_EVENT
from orchestrator.limits import usage_limits_json
from orchestrator.messages import AssistantMessage, Message
from orchestrator.observe.trace import NestedTrace, children_from_events
from orchestrator.observe.trace_context import current_trace_context
from orchestrator.output import StructuredAnswer
from orchestrator.runtime.handle import RunPruned, UnknownRun
from orchestrator.runtime.pending import WaitRule
from orchestrator.server.backend import IdempotencyKeyReused, RunExists, RunStart, RunView
from orchestrator.server.errors import HTTPRefusal
from orchestrator.store.changes import RUN
from orchestrator.store.errors import SessionOwned, StoreError, StoreUnavailable
from orchestrator.store.retention import PrunedRun, PruneReport, Retention, prune_run_store
from orchestrator.store.runs import InboxKeyReused, NewInboxItem, RunRecord, RunStore, StoredEvent

POLL_SECONDS = 0.1
"""How often a web node asks again for a run's events while the store cannot be reached."""
FOLLOW_SECONDS = 60.0
"""Longest an idle follower waits for a wake-up before it reads the run's log anyway (a safety net)."""
TERMINAL = frozenset({"run_completed", "run_failed", "run_cancelled"})
INBOX = "inbox"
"""The name a delivery accepted into a run's durable inbox reports."""


def _refused(event: ExternalEvent, why: str) -> Delivery:
    return Delivery(event.name, (), {INBOX: why})


def _of_session(event: StoredEvent, session_id: str) -> bool:
    """Whether ``event`` is the run's own, not one a subagent's request streamed through it."""
    owner: object = event.body.get("session_id", session_id)
    return owner == session_id


class StoreBackend:
    def __init__(
        self, store: RunStore, *, wait_rules: Iterable[WaitRule] = (), poll_seconds: float = POLL_SECONDS
    ) -> None:
        self.store = store
        self.rules = {rule.response_event: rule for rule in (*DEFAULT_WAIT_RULES, *wait_rules)}
        self.poll_seconds = poll_seconds
        self.wakeups = Wakeups(store)
        self._reads: dict[tuple[str, int], _SharedRead] = {}

    async def _call(self, function: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(function, *args)

    async def _record(self, request_id: str) -> RunRecord:
        record: RunRecord | None = await self._call(self.store.run, request_id)
        if record is None:
            pruned: PrunedRun | None = await self._call(self.store.pruned, request_id)
            if pruned is not None:
                raise RunPruned(request_id, pruned.reason, pruned.pruned)
            raise UnknownRun(request_id)
        return record

    async def prune(self, retention: Retention, now: float | None = None) -> PruneReport:
        """One prune pass over the run store (see ``prune_run_store``)."""
        report: PruneReport = await self._call(prune_run_store, self.store, retention, now)
        return report

    @staticmethod
    def _view(record: RunRecord) -> RunView:
        checkpoint = read(record.checkpoint)
        states = dict(checkpoint.states) if checkpoint and checkpoint.states else None
        if record.final:
            states = {**(states or {}), REQUEST.main.name: record.status}
        return RunView(record.request_id, record.session_id, states["phase"] if states else None, states, record.final)

    # runs -------------------------------------------------------------------

    async def start(self, start: RunStart) -> str:
        """Insert a queued run. A run started with an Idempotency-Key and no request id is named
        after the key (``keyed_request_id``), so a retry to any node finds the run it started:
        the same input in the same session gets that run's id again, another input a refusal.
        ``metadata`` (checked as ``AgentRunConfig.metadata``) is stored in the input row beside the message,
        and so are ``usage_limits`` (``"limits"``) and ``deadline``: the worker that carries the run applies them;
        ``model_settings`` and ``output_type`` (as ``AgentRunConfig`` takes them) in its ``settings``
        (``cluster.run_settings``; UnresolvableOutputType for a type another process could not import).
        The trace context of the span current here, if any, is stored too: every segment of the run is
        traced under it. ``owner`` is the principal the run is kept for (SessionOwned when the session is
        another's)."""
        session_id, key = start.session_id, start.idempotency_key
        keyed = start.request_id is None and key is not None
        request_id = start.request_id
        if request_id is None:
            request_id = uuid.uuid4().hex if key is None else keyed_request_id(session_id, key)
        encoded = wire.encode_message(start.message)
        if start.metadata:
            encoded["metadata"] = dict(AgentRunConfig(metadata=start.metadata).metadata)
        if start.usage_limits is not None:
            encoded["limits"] = usage_limits_json(start.usage_limits)
        if start.deadline is not None:
            encoded["deadline"] = start.deadline
        settings = encode_run_settings(start.model_settings, start.output_type)
        traced = current_trace_context()
        try:
            await self._call(
                lambda: self.store.create_run(
                    session_id, request_id, encoded, trace_context=traced, settings=settings, owner=start.owner
                )
            )
        except (StoreUnavailable, SessionOwned):
            raise
        except (SessionBusy, StoreError) as refused:
            if key is not None:
                earlier: RunRecord | None = await self._call(self.store.run, request_id)
                if (
                    earlier is not None
                    and earlier.session_id == session_id
                    and _same_json(earlier.input, encoded)
                    and _same_json(earlier.settings or {}, settings or {})
                ):
                    return request_id  # a retry: the run it started
                if earlier is not None and keyed:
                    raise IdempotencyKeyReused(
                        f"this Idempotency-Key started run {request_id!r} with another input or other settings"
                    ) from None
            if isinstance(refused, SessionBusy):
                raise
            raise RunExists(str(refused)) from None
        return request_id

    async def run(self, request_id: str) -> RunView:
        return self._view(await self._record(request_id))

    async def result(self, request_id: str) -> AssistantMessage | None:
        """The final answer of a completed run; None while it has none (it runs, or it failed or was cancelled).

        A run started with its own output type gives a ``StructuredAnswer`` whose ``output`` is the answer as a
        value of that type (the worker accepted it against the same type). UnknownRun when there is no such run.
        """
        record = await self._record(request_id)
        if record.status != "completed":
            return None
        answer: AssistantMessage | None = None
        position = 0
        while stored := await self._call(self.store.events, request_id, position):
            position = stored[-1].seq
            for event in stored:
                if event.type == "run_completed" and _of_session(event, record.session_id):
                    completed = wire.decode_event(dict(event.body))
                    assert isinstance(completed, RunCompletedEvent)
                    answer = completed.result
        spec = decode_run_settings(record.settings).output_type
        if answer is None or spec is None:
            return answer
        return StructuredAnswer.of(answer, spec.parse(answer.content))

    async def follow(self, request_id: str, after: int) -> tuple[bool, AsyncIterator[list[dict[str, Any]]]]:
        ended = (await self.run(request_id)).done
        return ended, await self.events(request_id, after)

    async def events(self, request_id: str, after: int) -> AsyncIterator[list[dict[str, Any]]]:
        session_id = (await self._record(request_id)).session_id

        async def batches() -> AsyncIterator[list[dict[str, Any]]]:
            position = after
            while True:
                woken = self.wakeups.arm(RUN, request_id)  # before the read: a change after it still wakes
                try:
                    stored, record = await self._tail(request_id, position)
                except StoreUnavailable:
                    # The stream stays open while the store is away; its events follow when it is back.
                    await anyio.sleep(self.poll_seconds)
                    continue
                if stored:
                    position = stored[-1].seq
                    yield [dict(event.body) for event in stored]
                    if stored[-1].type in TERMINAL and _of_session(stored[-1], session_id):
                        return
                    continue
                if record is None or (record.final and record.last_seq <= position):
                    return
                with anyio.move_on_after(FOLLOW_SECONDS):
                    await woken.wait()

        return batches()

    async def _tail(self, request_id: str, after: int) -> tuple[list[StoredEvent], RunRecord | None]:
        """The run's events after ``after`` (and, when there are none, its record): one read for every
        follower of the run at that position, however many ask at once."""
        key = (request_id, after)
        shared = self._reads.get(key)
        if shared is not None:
            await shared.done.wait()
            if shared.result is not None:
                return shared.result
            return await self._tail(request_id, after)  # the reader failed or was cancelled: read again
        shared = self._reads[key] = _SharedRead()
        try:
            shared.result = await self._call(self._read_tail, request_id, after)
            return shared.result
        finally:
            del self._reads[key]
            shared.done.set()

    def _read_tail(self, request_id: str, after: int) -> tuple[list[StoredEvent], RunRecord | None]:
        stored = self.store.events(request_id, after)
        return stored, None if stored else self.store.run(request_id)

    async def cancel(self, request_id: str) -> tuple[RunView, bool]:
        record = await self._record(request_id)

        def final_event(seq: int) -> StoredEvent:
            event = RunCancelledEvent(session_id=record.session_id, request_id=request_id, seq=seq, ts=time.time())
            return StoredEvent(request_id, seq, event.name, wire.encode_event(event))

        changed: RunRecord = await self._call(self.store.cancel, request_id, final_event, settle_open_calls)
        return self._view(changed), not record.final

    async def delete_session(self, session_id: str, cancel: bool) -> bool:
        deleted: bool = await self._call(lambda: self.store.delete_session(session_id, cancel=cancel))
        return deleted

    async def transitions(self, request_id: str) -> list[Step]:
        session_id = (await self._record(request_id)).session_id
        steps: list[Step] = []
        position = 0
        while stored := await self._call(self.store.events, request_id, position):
            position = stored[-1].seq
            steps += [
                Step(e.body["machine"], e.body["region"], e.body["source"], e.body["trigger"], e.body["dest"])
                for e in stored
                if e.type == "transition" and _of_session(e, session_id)
            ]
        return steps

    async def requests(self, session_id: str) -> list[str]:
        records: list[RunRecord] = await self._call(lambda: self.store.runs(session_id))
        return [record.request_id for record in records]

    async def child_traces(self, request_id: str) -> list[NestedTrace]:
        """The paths of the subagent requests the run started, nested as they ran, from its event log: the
        worker that carried each part of the run stored its children's events there with the run's own."""
        session_id = (await self._record(request_id)).session_id
        wanted = ("transition", "subagent_started")
        events: list[AgentEvent] = []
        position = 0
        while stored := await self._call(self.store.events, request_id, position):
            position = stored[-1].seq
            events += [wire.decode_event(dict(e.body)) for e in stored if e.type in wanted]
        return children_from_events(events, session_id)

    # answers ----------------------------------------------------------------

    async def deliver(
        self, session_id: str, request_id: str | None, event: ExternalEvent, idempotency_key: str | None
    ) -> Delivery:
        record = await self._target(session_id, request_id)
        if record is None and request_id is None:
            record = await self._parent_of(session_id)  # a subagent's session: its question waits in a parent run
        which = f"request {request_id!r} of" if request_id else "request in"
        not_running = f"no running {which} session {session_id!r}"
        retry = record is None and idempotency_key is not None
        if retry:
            # A retry of an answer its run took before it ended: the key finds that item, whatever the run is now.
            record = await self._last_run(session_id, request_id)
        if record is None:
            return _refused(event, not_running)
        item = NewInboxItem(session_id, record.request_id, event.name, dict(event.payload), idempotency_key)
        try:
            # Checked against the run as it is when the item goes in: a worker's commit cannot come between.
            await self._call(self.store.post, item, lambda locked: self._problem(locked, event, session_id))
        except StoreUnavailable:
            raise  # a 503: the client retries, with its Idempotency-Key if it sent one
        except InboxKeyReused as reused:
            raise HTTPRefusal(422, "IdempotencyKeyReused", str(reused)) from None
        except StoreError as ended:
            return _refused(event, not_running if retry else str(ended))
        return Delivery(event.name, (INBOX,), {})

    async def _last_run(self, session_id: str, request_id: str | None) -> RunRecord | None:
        """The run ``request_id`` names in ``session_id``, or the session's newest one, ended or not."""
        if request_id is not None:
            record: RunRecord | None = await self._call(self.store.run, request_id)
            return record if record is not None and record.session_id == session_id else None
        records: list[RunRecord] = await self._call(lambda: self.store.runs(session_id))
        return max(records, key=lambda r: r.created, default=None)

    async def _target(self, session_id: str, request_id: str | None) -> RunRecord | None:
        if request_id is not None:
            record: RunRecord | None = await self._call(self.store.run, request_id)
            return record if record is not None and record.session_id == session_id and not record.final else None
        active: list[RunRecord] = await self._call(lambda: self.store.runs(session_id, active=True))
        return active[0] if active else None

    async def _parent_of(self, session_id: str) -> RunRecord | None:
        """The active run one of whose subagents waits in ``session_id`` (its checkpoint lists the question)."""
        active: list[RunRecord] = await self._call(lambda: self.store.runs(active=True))
        for record in active:
            checkpoint = read(record.checkpoint) if record.status == "running" else None
            if checkpoint is not None and any(w.session_id == session_id for w in checkpoint.children):
                return record
        return None

    def _problem(self, record: RunRecord, event: ExternalEvent, session_id: str | None = None) -> str | None:
        """Why ``event`` cannot go into ``record``'s inbox (an answer for subagent session ``session_id`` when that
        is not the run's own), or None."""
        payload = event.payload
        child = session_id is not None and session_id != record.session_id
        if event.name == STEERING_EVENT and not child:
            content = payload.get("content") if isinstance(payload, Mapping) else None
            if not isinstance(content, str) or not content.strip():
                return "steering needs non-empty 'content' text"
            return None  # a parked run is made runnable; its waiting calls go on waiting, as in one process
        rule = self.rules.get(event.name)
        if rule is None:
            return f"no extension takes {event.name!r} events"
        key = payload.get("tool_call_id") if isinstance(payload, Mapping) else None
        if child:
            # A subagent's question waits only while its carrier holds the parent run.
            checkpoint = read(record.checkpoint) if record.status == "running" else None
            waits = [w for w in checkpoint.children if w.session_id == session_id] if checkpoint else []
        else:
            checkpoint = read(record.checkpoint)
            if checkpoint is not None and isinstance(key, str) and key in checkpoint.expired:
                return checkpoint.expired[key]
            waits = list(checkpoint.unanswered()) if checkpoint else []
        wait = next((w for w in waits if w.tool_call_id == key), None) if isinstance(key, str) else None
        if wait is None or wait.response_event != event.name:
            return f"no waiting call tool_call_id={key!r} in session {session_id if child else record.session_id!r}"
        if wait.expires_at is not None and time.time() >= wait.expires_at:
            return expired_reason(wait.tool_call_id, wait.expires_at)  # its carrier has not taken the default yet
        return rule.validator(wait.payload)(payload)

    async def pending(self, session_id: str | None) -> list[dict[str, Any]]:
        active: list[RunRecord] = await self._call(lambda: self.store.runs(session_id, active=True))
        calls: list[dict[str, Any]] = []
        now = time.time()
        for record in active:
            checkpoint = read(record.checkpoint)
            if checkpoint is None:
                continue
            live = record.status == "running"
            for wait in checkpoint.unanswered():
                if wait.expires_at is None or wait.expires_at > now:  # an expired one takes no answer any more
                    calls.append(_pending_call(record, wait, record.session_id, live))
            # A subagent's question is listed only while its carrier holds the parent run.
            calls += [_pending_call(record, wait, wait.session_id, True) for wait in checkpoint.children if live]
        return calls

    # sessions ---------------------------------------------------------------

    async def sessions(self) -> list[dict[str, Any]]:
        ids: list[str] = await self._call(self.store.sessions)
        active: list[RunRecord] = await self._call(lambda: self.store.runs(active=True))
        titles: dict[str, str] = await self._call(self.store.titles, ids)
        by_session = {record.session_id: record for record in active}
        listed = []
        for session_id in ids:
            record = by_session.get(session_id)
            view = self._view(record) if record is not None else None
            listed.append(
                {
                    "session_id": session_id,
                    "title": titles.get(session_id, ""),
                    "request_id": record.request_id if record else None,
                    "state": view.state if view else None,
                    "states": view.states if view else None,
                    "pending": await self.pending(session_id) if record else [],
                }
            )
        return listed

    async def session(self, session_id: str) -> dict[str, Any] | None:
        if session_id not in await self._call(self.store.sessions):
            return None
        messages = await self._call(self.store.history, session_id)
        active: list[RunRecord] = await self._call(lambda: self.store.runs(session_id, active=True))
        record = active[0] if active else None
        checkpoint = read(record.checkpoint) if record else None
        titles: dict[str, str] = await self._call(self.store.titles, [session_id])
        return {
            "session_id": session_id,
            "title": titles.get(session_id, ""),
            "request_id": record.request_id if record else None,
            "messages": [wire.encode_message(m) for m in messages],
            "states": self._view(record).states if record else None,
            "plan_mode": checkpoint.plan_mode if checkpoint else None,
            "pending": await self.pending(session_id),
        }

    async def owners(self, session_ids: list[str]) -> dict[str, str]:
        found: dict[str, str] = await self._call(self.store.owners, session_ids)
        return found

    async def fork(
        self, session_id: str, target: str | None, turns: int | None, *, owner: str | None = None
    ) -> tuple[str, int]:
        """The run store's fork (``RunStore.fork``) into ``target``, or a new id when None: the new id and how many
        messages it holds. ForkRefused, or SessionBusy while a run of the session has not ended."""
        new = target or f"{session_id}-fork-{os.urandom(3).hex()}"
        copied: int = await self._call(lambda: self.store.fork(session_id, new, turns=turns, owner=owner))
        return new, copied

    async def set_title(self, session_id: str, title: str) -> bool:
        found: bool = await self._call(self.store.set_title, session_id, title)
        return found

    def running(self) -> int | None:
        return None


class _SharedRead:
    """One read of a run's log that several followers wait for."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: tuple[list[StoredEvent], RunRecord | None] | None = None


def settle_open_calls(record: RunRecord, history: list[Message]) -> list[Message]:
    """A cancelled result for each open call of a run cancelled while nobody runs it (``RunStore.cancel``)."""
    try:
        checkpoint = read(record.checkpoint)
    except UnreadableCheckpoint:
        checkpoint = None
    return list(cancelled_results(checkpoint, history))


def keyed_request_id(session_id: str, idempotency_key: str) -> str:
    """The request id of the run that POST /sessions/{session_id}/runs with this Idempotency-Key starts."""
    digest = hashlib.sha256(f"{session_id}\0{idempotency_key}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"key-{digest[:32]}"


def _same_json(stored: Mapping[str, Any], encoded: Mapping[str, Any]) -> bool:
    """Whether two wire values are one (the stored one went through JSON: tuples came back as lists)."""
    return json.dumps(stored, sort_keys=True) == json.dumps(encoded, sort_keys=True)


def _pending_call(record: RunRecord, wait: Waiting, session_id: str | None, live: bool) -> dict[str, Any]:
    """The wire form of a call of ``record`` that waits for an answer, listed under ``session_id``."""
    return {
        "session_id": session_id,
        "request_id": record.request_id,
        "tool_call_id": wait.tool_call_id,
        "event": wait.event,
        "payload": dict(wait.payload),
        "response_event": wait.response_event,
        "live": live,
    }

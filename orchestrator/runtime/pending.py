"""Pause a tool call until a matching external response arrives, and list what waits.

A ResponseRouter keys each wait by (session_id, response event name,
tool_call_id); ``accept`` is safe from any thread and wakes the waiter on its
own trio loop. Each wait is an approval machine, so a response is taken at
most once and only while the call waits. A payload is copied and validated
before the call is marked answered: one that cannot be copied, or that the
validator refuses (or fails on), is refused and the call keeps waiting.

Every wait is also entered on its agent's ``WaitingCalls`` board while it
lasts, so ``client.pending()`` lists the calls of every ResponseRouter (ask_user,
Plan Mode, any extension built on it) without knowing the extensions, plus the
waits a session store recorded in an earlier process (``StoredApprovals``).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import trio

from machines.approval import APPROVAL
from machines.build import BoundMachine, GuardRefused, IllegalTransition
from machines.values import FieldValues
from orchestrator.checks import number
from orchestrator.checks import text as _text
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Refusal, Verdict
from orchestrator.errors import AgentError
from orchestrator.events import AgentEvent

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext, ContextRun

log = logging.getLogger("orchestrator.pending")

Validator = Callable[[Mapping[str, Any]], str | None]


@functools.cache
def require_bool(field: str) -> Validator:
    """A validator: ``field`` must be present and a bool (one shared validator per field name)."""

    def check(payload: Mapping[str, Any]) -> str | None:
        if field not in payload:
            return f"missing {field!r}"
        if not isinstance(payload[field], bool):
            return f"{field!r} must be a bool, got {type(payload[field]).__name__}"
        return None

    return check


@attrs.frozen(eq=False, repr=False)  # FieldValues: attrs' eq, hash and repr, shared
class SettledAnswer(FieldValues):
    """The result a stored wait gets from the answer recorded for it after its process stopped."""

    content: str
    status: str = "succeeded"
    plan_mode: str | None = None  # the session's Plan Mode state after this answer, when it changes it
    events: tuple[AgentEvent, ...] = ()  # announced when the answer is applied


@attrs.frozen(eq=False, repr=False)  # FieldValues: attrs' eq, hash and repr, shared
class WaitRule(FieldValues):
    """How a session store checks and applies an answer to a wait whose process stopped.

    ``validator`` builds, from the payload the wait announced, the same check a
    live answer passes; ``settle`` turns the announced payload and a valid
    answer into the call's result.
    """

    response_event: str
    validator: Callable[[Mapping[str, Any]], Validator]
    settle: Callable[[Mapping[str, Any], Mapping[str, Any]], SettledAnswer]


class ResponseWithdrawn(AgentError):
    """The wait ended without a response (its request is ending)."""


class ResponseExpired(AgentError):
    """Nobody answered a wait before its expiry; the waiting call takes its default.

    ``expires_at`` is the wait's deadline in seconds since the epoch, ``seconds`` the ``expires_after`` it was given.
    """

    def __init__(self, key: str, response_event: str, seconds: float, expires_at: float) -> None:
        super().__init__(f"nobody answered {response_event} for {key!r} within {seconds:g} s")
        self.key = key
        self.response_event = response_event
        self.seconds = seconds
        self.expires_at = expires_at


#: How many expired waits a router remembers, to refuse their late answers with the reason.
REMEMBERED_EXPIRIES = 4096


@attrs.frozen(eq=False, repr=False)  # FieldValues: attrs' eq, hash and repr, shared
class PendingCall(FieldValues):
    """A call waiting for an external answer: send ``response_event`` with its ``tool_call_id``.

    ``event`` and ``payload`` are the question event's name and payload (what the
    user is asked), the payload as JSON data (``orchestrator.wire``). ``live`` is
    False for a wait recorded by a session store in an earlier process: the store
    takes the answer, and the session's next request resumes the call with it.
    """

    session_id: str
    request_id: str
    tool_call_id: str
    event: str
    payload: Mapping[str, Any]
    response_event: str
    live: bool = True


@runtime_checkable
class StoredApprovals(Protocol):
    """An extension that records waits durably (a session store)."""

    def pending_approvals(self, session_id: str | None = None) -> Sequence[Any]:
        """Recorded waits, with the fields of PendingCall and ``response`` (None while unanswered)."""
        ...


@runtime_checkable
class DelegatedWaits(Protocol):
    """An extension whose child requests (subagents) run on other agents: their waiting calls."""

    def delegated_calls(self, session_id: str | None = None) -> list[PendingCall]:
        """Waiting calls of the children: all (None), those of a parent session's children, or of one child."""
        ...


class WaitingCalls:
    """An agent's board of live waits, in the order they began; safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: dict[int, PendingResponse] = {}

    def add(self, wait: PendingResponse) -> None:
        with self._lock:
            self._waits[id(wait)] = wait

    def discard(self, wait: PendingResponse) -> None:
        with self._lock:
            self._waits.pop(id(wait), None)

    def calls(self, session_id: str | None = None) -> list[PendingCall]:
        with self._lock:
            waits = [w for w in self._waits.values() if session_id in (None, w.session_id)]
        return [w.as_call() for w in waits if w.state == "waiting"]

    def expiry(self, session_id: str, tool_call_id: str) -> float | None:
        """The ``expires_at`` of the live wait of ``tool_call_id`` in ``session_id`` (None: none, or no expiry)."""
        with self._lock:
            for wait in self._waits.values():
                if wait.key == tool_call_id and wait.session_id == session_id:
                    return wait.expires_at
        return None


def pending_calls(
    board: WaitingCalls, extensions: Iterable[object], running: Iterable[str], session_id: str | None = None
) -> list[PendingCall]:
    """Live waits first, then stored unanswered ones of sessions that run no request here, then children's.

    A session with a running request has its waits on the board; a stored wait of
    such a session is either one of them or about to be cancelled by it.
    """
    calls = board.calls(session_id)
    busy = set(running)
    seen = {(c.session_id, c.tool_call_id) for c in calls}
    for extension in extensions:
        if not isinstance(extension, StoredApprovals):
            continue
        for stored in extension.pending_approvals(session_id):
            key = (stored.session_id, stored.tool_call_id)
            if stored.response is not None or stored.session_id in busy or key in seen:
                continue
            seen.add(key)
            calls.append(
                PendingCall(
                    stored.session_id,
                    stored.request_id,
                    stored.tool_call_id,
                    stored.event,
                    dict(stored.payload),
                    stored.response_event,
                    live=False,
                )
            )
    for extension in extensions:
        if isinstance(extension, DelegatedWaits):
            for delegated in extension.delegated_calls(session_id):
                key = (delegated.session_id, delegated.tool_call_id)
                if key not in seen:
                    seen.add(key)
                    calls.append(delegated)
    return calls


def _response_valid(event: Any) -> bool:
    wait: PendingResponse = event.model.host
    return wait._valid(event.kwargs["payload"])


#: The approval machine's guards, shared by every wait (each reaches its own as the model's host).
_APPROVAL_GUARDS: Mapping[str, Callable[[Any], bool]] = {"response_valid": _response_valid}


class PendingResponse:
    """One paused call: its key, its approval machine and its wake-up.

    The waiting task is parked directly (``wait_task_rescheduled``) rather than
    on a ``trio.Event``: thousands of calls may wait at once, and each keeps
    only this object, its machine and the parked task.
    """

    __slots__ = (
        "_task",
        "_woken",
        "expires_at",
        "key",
        "machine",
        "payload",
        "problem",
        "question",
        "request_id",
        "response_event",
        "session_id",
        "token",
        "validate",
    )

    def __init__(
        self,
        session_id: str,
        request_id: str,
        response_event: str,
        key: str,
        validate: Validator | None,
        question: AgentEvent | None = None,
    ) -> None:
        self.session_id = session_id
        self.question = question
        self.request_id = request_id
        self.response_event = response_event
        self.key = key
        self.validate = validate
        self.payload: dict[str, Any] = {}
        self.problem: str | None = None
        self.token = trio.lowlevel.current_trio_token()
        self.machine = BoundMachine(APPROVAL, _APPROVAL_GUARDS, host=self)
        self._woken = False
        self._task: trio.lowlevel.Task | None = None
        # When nobody's answer is taken any more (seconds since the epoch; None: never): a plain value to store.
        self.expires_at: float | None = None

    def _valid(self, payload: Mapping[str, Any]) -> bool:
        try:
            self.problem = self.validate(payload) if self.validate else None
        except Exception as error:
            self.problem = f"the validator failed: {type(error).__name__}: {error}"
        return self.problem is None

    @property
    def state(self) -> str:
        return self.machine.state()

    @property
    def woken(self) -> bool:
        """Whether the waiter was woken (answered or withdrawn)."""
        return self._woken

    def wake(self) -> None:
        """Wake the waiting task (idempotent); call it in the wait's trio thread (``token.run_sync_soon``)."""
        self._woken = True
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def parked(self) -> Callable[[Any], trio.lowlevel.Abort] | None:
        """Register the current task as the waiter: the abort function to wait with, or None once woken.

        The waiter then awaits ``trio.lowlevel.wait_task_rescheduled(abort)`` itself
        (a checkpoint when None): no coroutine of its own per wait.
        """
        if self._woken:
            return None
        self._task = trio.lowlevel.current_task()
        return self._abort

    def _abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED

    def as_call(self) -> PendingCall:
        from orchestrator.wire.format import json_value  # the wire codecs load on first use

        question = self.question
        return PendingCall(
            self.session_id,
            self.request_id,
            self.key,
            question.name if question is not None else "",
            json_value(question.payload) if question is not None else {},
            self.response_event,
        )


_EXPIRES_AFTER = number(above=0, optional=True)


def _expired_event(pending: PendingResponse, outcome: str) -> AgentEvent:
    from orchestrator.events import WaitExpiredEvent  # an optional feature's event, built on first use

    assert pending.expires_at is not None
    return WaitExpiredEvent(
        session_id=pending.session_id,
        request_id=pending.request_id,
        tool_call_id=pending.key,
        awaited_event=pending.response_event,
        expires_at=pending.expires_at,
        outcome=outcome,
    )


def _copied(payload: Mapping[str, Any]) -> dict[str, Any] | Refusal:
    """A deep copy of an external payload, taken before anything reads it, or why it cannot be made.

    The waiting call then gets exactly what was validated, whatever the sender
    does to its own object afterwards.
    """
    try:
        return copy.deepcopy(dict(payload))
    except Exception as error:
        return Refusal(f"the payload cannot be copied: {type(error).__name__}: {error}")


class ResponseRouter:
    """Waits keyed by session and tool_call_id, answered by external events."""

    def __init__(self, key_field: str = "tool_call_id") -> None:
        _text(blank=False).check("ResponseRouter.key_field", key_field)
        self.key_field = key_field
        self._lock = threading.Lock()
        self._waits: dict[tuple[str, str, str], PendingResponse] = {}
        # Waits that expired, oldest first, with why a late answer to each is refused.
        self._expired: collections.OrderedDict[tuple[str, str, str], str] = collections.OrderedDict()

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        """Take ``event`` if it answers a waiting call of ``config.session_id``."""
        return self.consider(config, event) is True

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Verdict:
        """Take ``event`` if it answers a waiting call of ``config.session_id``; else a Refusal saying why."""
        if not isinstance(event.payload, Mapping):
            return Refusal(f"the payload must be an object, got {type(event.payload).__name__}")
        payload = _copied(event.payload)
        if isinstance(payload, Refusal):
            return payload
        key = payload.get(self.key_field)
        if self.key_field not in payload:
            return Refusal(f"missing {self.key_field!r}")
        if not isinstance(key, str):
            return Refusal(f"{self.key_field!r} must be a string, got {type(key).__name__}")
        with self._lock:
            wait = self._waits.get((config.session_id, event.name, key))
            if wait is None:
                expired = self._expired.get((config.session_id, event.name, key))
                if expired is not None:
                    return Refusal(expired)
                return Refusal(f"no waiting call {self.key_field}={key!r} in session {config.session_id!r}")
            if config.request_id is not None and config.request_id != wait.request_id:
                return Refusal(
                    f"call {self.key_field}={key!r} waits in request {wait.request_id!r}, not {config.request_id!r}"
                )
            try:
                wait.machine.fire("answer", payload=payload)
            except GuardRefused:
                return Refusal(wait.problem or "the response is not valid")
            except IllegalTransition:
                return Refusal(f"call {self.key_field}={key!r} no longer waits")
            wait.payload = payload
            del self._waits[(wait.session_id, wait.response_event, wait.key)]
        try:
            wait.token.run_sync_soon(wait.wake)
        except trio.RunFinishedError:
            return Refusal(f"the request of call {self.key_field}={key!r} has ended")
        return True

    async def wait(
        self,
        context: AgentRunContext,
        key: str,
        *,
        response_event: str,
        validate: Validator | None = None,
        announce: AgentEvent | None = None,
        expires_after: float | None = None,
        expired_outcome: str = "expired",
    ) -> dict[str, Any]:
        """Pause the request in awaiting_approval until ``response_event`` for ``key``.

        ``announce`` is emitted once the wait is registered and the request paused,
        so an answer to it can never arrive before the wait exists. A request resumed from a
        run store whose log already holds that question only publishes it to its extensions
        (they record the wait and find its answer): the log and its readers get it once. With
        ``expires_after`` (seconds), a wait nobody answered in time expires: a
        ``wait_expired`` event (saying ``expired_outcome``) is emitted, the wait
        raises ResponseExpired, and a later answer is refused saying it expired.
        The deadline is the wait's ``expires_at`` (seconds since the epoch), a
        plain value; one trio timer per waiting call fires it, nothing polls. A
        request resumed from a run store keeps the deadline its wait had before
        (``expiry_before``): one that passed meanwhile expires at once.
        """
        run = context._run
        pending = PendingResponse(context.session_id, context.request_id, response_event, key, validate, announce)
        if expires_after is not None:
            _EXPIRES_AFTER.check("expires_after", expires_after)
            earlier = run.expiry_before(key)
            pending.expires_at = earlier if earlier is not None else time.time() + expires_after
        slot = (pending.session_id, response_event, key)
        with self._lock:
            if slot in self._waits:
                pending.machine.unbind()
                raise RuntimeError(f"{response_event} for {key!r} is already awaited")
            self._waits[slot] = pending
        board = run.agent.waiting
        board.add(pending)
        try:
            # context.paused(), without an async generator per wait.
            await run.pause()
            try:
                if announce is not None:
                    await _announce(run, key, announce)
                if pending.expires_at is None:
                    abort = pending.parked()
                    if abort is None:
                        await trio.lowlevel.checkpoint()
                    else:
                        await trio.lowlevel.wait_task_rescheduled(abort)
                else:
                    assert expires_after is not None
                    await self._wait_until_expiry(pending, slot, expires_after)
                    if pending.state == "expired":
                        await run.emit(_expired_event(pending, expired_outcome))
            finally:
                await run.resume()
        finally:
            board.discard(pending)
            with self._lock:
                if self._waits.get(slot) is pending:
                    del self._waits[slot]
                if pending.state == "waiting":
                    pending.machine.fire("withdraw")
            pending.machine.unbind()
        if pending.state == "expired":
            assert pending.expires_at is not None and expires_after is not None
            raise ResponseExpired(key, response_event, expires_after, pending.expires_at)
        if pending.state != "answered":
            raise ResponseWithdrawn(f"{response_event} for {key!r} was withdrawn")
        return pending.payload

    async def _wait_until_expiry(
        self, pending: PendingResponse, slot: tuple[str, str, str], expires_after: float
    ) -> None:
        """Wait for the answer until ``pending.expires_at``; then, unless answered meanwhile, expire the wait."""
        assert pending.expires_at is not None
        seconds = pending.expires_at - time.time()
        with trio.move_on_at(trio.current_time() + max(0.0, seconds)):
            abort = pending.parked()
            if abort is None:
                await trio.lowlevel.checkpoint()
            else:
                await trio.lowlevel.wait_task_rescheduled(abort)
        with self._lock:
            if pending.state != "waiting":
                return  # answered (or withdrawn) as the timer fired: that stands
            pending.machine.fire("expire")
            if self._waits.get(slot) is pending:
                del self._waits[slot]
            self._expired[slot] = (
                f"call {self.key_field}={pending.key!r} expired: nobody answered it within {expires_after:g} s"
            )
            while len(self._expired) > REMEMBERED_EXPIRIES:
                self._expired.popitem(last=False)

    def waiting(self, session_id: str | None = None) -> list[PendingResponse]:
        """Calls that still wait (optionally of one session)."""
        with self._lock:
            return [w for w in self._waits.values() if session_id in (None, w.session_id)]

    def withdraw_request(self, session_id: str, request_id: str) -> None:
        """Drop every wait of one request and wake its waiters (failure clean-up).

        Request ids given in AgentRunConfig are chosen by the caller and may repeat
        across sessions, so a request is named by both.
        """
        with self._lock:
            stale = [
                slot for slot, w in self._waits.items() if (w.session_id, w.request_id) == (session_id, request_id)
            ]
            dropped = [self._waits.pop(slot) for slot in stale]
            for wait in dropped:
                if wait.state == "waiting":
                    wait.machine.fire("withdraw")
        for wait in dropped:
            with contextlib.suppress(trio.RunFinishedError):
                wait.token.run_sync_soon(wait.wake)


async def _announce(run: ContextRun, key: str, announce: AgentEvent) -> None:
    """Stream the question of a wait, or (asked before the request was resumed) only publish it."""
    if run.asked_before(key):
        await run.publish(announce)
    else:
        await run.emit(announce)

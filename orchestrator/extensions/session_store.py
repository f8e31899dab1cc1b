"""SessionStoreExtension: an Agent's sessions kept in a session store.

Register it as an extension and let it keep the history (``history=None``).
It works the same on every ``orchestrator.store.SessionStore``;
``SQLiteSessionStore`` is this extension on an SQLite file.

- **Ownership.** A request holds its session in the store from its first hook
  (``on_tool``) to its end. A second runner of the same session (another
  process, or another store object) fails at once with ``SessionLocked``; a
  runner that died holds nothing.
- **Restore.** ``on_tool`` loads the session and mends what a stopped process
  left (``orchestrator.store.restore``): a call without a result gets a
  cancelled one ("not completed: the process stopped"), or, when the call
  waited for an approval that was answered after the restart, its result from
  that answer (``approval_resumed``). Results stay where they were recorded,
  before the new request's input. A row that does not decode is reported once
  (logged with its row id, ``stored_message_unreadable``), kept aside in the
  store, and read as a marked placeholder message from then on. The mended
  history is stored before the request goes on; ``on_state`` hands it over.
- **Appends.** Every appended message is committed from ``on_event`` before the
  request goes on, at the position it was appended at, so concurrent tool calls
  keep their order. The commit runs under a shield bounded by the runtime's
  ``CLEANUP_SECONDS``: a message appended while its request is being cancelled
  is still committed. A message that cannot be stored fails its own request
  (and nothing else of that request is stored after it); other sessions go on.
- **Approvals.** An event whose payload names a ``tool_call_id`` and a
  ``response_event`` (``ask_user``, Plan Mode proposals) is recorded before the
  event reaches any consumer, and forgotten when its call gets a result or its
  request ends. After a restart ``pending_approvals()`` lists what was
  waiting; the usual response event sent through ``Agent.emit_external_event``
  while no process runs the session is checked exactly like a live answer
  (``WaitRule``) and recorded, or refused with nothing changed.
- **Plan Mode.** Every transition of a session's ``plan_mode`` machine is
  recorded; a process whose PlanModeExtension does not know the session puts
  it back in Plan Mode (``plan_mode_restored``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import trio

from machines.plan_mode import PLAN_MODE
from machines.request import REQUEST
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Refusal, Verdict
from orchestrator.events import (
    AgentEvent,
    HistoryReplacedEvent,
    MessageAppendedEvent,
    RunCancelledEvent,
    TransitionEvent,
)
from orchestrator.extensions.ask_user import ASK_USER_WAIT
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.client_tools import CLIENT_TOOL_WAIT
from orchestrator.extensions.plan_mode import ENTER_WAIT, EXIT_WAIT, PlanModeExtension
from orchestrator.extensions.tool_approval import TOOL_APPROVAL_WAIT
from orchestrator.messages import Message
from orchestrator.runtime.fingerprint import AgentChanged, AgentFingerprint, check_resumed, removed_tools
from orchestrator.runtime.pending import WaitRule
from orchestrator.runtime.run import CLEANUP_SECONDS
from orchestrator.store import (
    PendingApproval,
    SessionChange,
    SessionLock,
    SessionLocked,
    SessionStore,
    StoreError,
)
from orchestrator.store.restore import read_row, restore_session

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

__all__ = [
    "DEFAULT_WAIT_RULES",
    "SESSIONS_NOT_RUNS",
    "ApprovalResumedEvent",
    "PlanModeRestoredEvent",
    "SessionStoreExtension",
    "StoredMessageUnreadableEvent",
]

log = logging.getLogger("orchestrator.store")

DEFAULT_WAIT_RULES: tuple[WaitRule, ...] = (ASK_USER_WAIT, ENTER_WAIT, EXIT_WAIT, TOOL_APPROVAL_WAIT, CLIENT_TOOL_WAIT)

_FINAL_PHASES = REQUEST.main.final_states
# Plan Mode states a restart returns to Plan Mode.
_PLAN_ACTIVE = frozenset({"plan_active", "exit_awaiting_approval"})
# How long a new request waits for a session held only for a moment (an answer being recorded).
_LOCK_PATIENCE = 0.5

SESSIONS_NOT_RUNS = (
    "{name} keeps sessions, not runs: an answer stored while no process runs the session takes effect only at"
    " the session's next request. For runs that resume by themselves after a restart, open the store with"
    " orchestrator.cluster.open_durable_agent(agent, 'app.db') (see the Durability page)."
)
"""The DeprecationWarning constructing a session store extension gives (``{name}``: its class)."""


def _callers_level(extension: object) -> int:
    """The ``stacklevel`` that names the code constructing ``extension``, past its classes' own ``__init__``s."""
    level, frame = 2, sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is extension:
        level, frame = level + 1, frame.f_back
    return level


@attrs.frozen(kw_only=True, repr=False)
class ApprovalResumedEvent(AgentEvent):
    """A call that waited when its process stopped got its result from the answer recorded since."""

    kind: ClassVar[str] = "approval_resumed"
    tool_call_id: str
    response_event: str


@attrs.frozen(kw_only=True, repr=False)
class PlanModeRestoredEvent(AgentEvent):
    """The session was in Plan Mode when its last process stopped; Plan Mode is active again."""

    kind: ClassVar[str] = "plan_mode_restored"


@attrs.frozen(kw_only=True, repr=False)
class StoredMessageUnreadableEvent(AgentEvent):
    """A stored message did not decode; a marked placeholder stands in its place from now on."""

    kind: ClassVar[str] = "stored_message_unreadable"
    row_id: int
    reason: str


def _fingerprint_text(context: AgentRunContext) -> str | None:
    fingerprint = getattr(context.agent, "fingerprint", None)
    return fingerprint.text() if isinstance(fingerprint, AgentFingerprint) else None


async def _judge_agent(
    context: AgentRunContext, waits: Iterable[PendingApproval]
) -> tuple[AgentChanged | None, frozenset[str]]:
    """Apply the agent's ``on_agent_changed`` policy when a recorded wait was left by an agent with another
    fingerprint: the refusal (None: the request goes on), and the tools of that agent this one has no more."""
    current = getattr(context.agent, "fingerprint", None)
    if not isinstance(current, AgentFingerprint):
        return None, frozenset()
    stored = next(
        (
            found
            for found in (AgentFingerprint.parse(wait.fingerprint) for wait in waits)
            if found is not None and found.digest != current.digest
        ),
        None,
    )
    if stored is None:
        return None, frozenset()
    try:
        await check_resumed(context, stored, current, getattr(context.agent, "on_agent_changed", "warn"))
    except AgentChanged as refused:
        return refused, frozenset()
    available = {tool.name for tool in context.agent.tools} | set(context.tools)
    return None, removed_tools(stored, sorted(available))


class SessionStoreExtension(AgentExtension):
    """Durable sessions in ``store`` (create the agent with ``history=None``)."""

    priority = -100
    fingerprinted = False  # where sessions are kept, not what the agent is
    deprecated: ClassVar[bool] = True
    """Whether constructing it warns (``SESSIONS_NOT_RUNS``); the terminal's own session file does not."""

    def __init__(self, store: SessionStore, *, wait_rules: Iterable[WaitRule] = ()) -> None:
        if self.deprecated:
            warnings.warn(
                SESSIONS_NOT_RUNS.format(name=type(self).__name__), DeprecationWarning, stacklevel=_callers_level(self)
            )
        self.store = store
        self.wait_rules = {rule.response_event: rule for rule in (*DEFAULT_WAIT_RULES, *wait_rules)}
        self._held: dict[str, tuple[AgentRunContext, SessionLock]] = {}
        self._positions: dict[AgentRunContext, int] = {}
        self._restored: dict[AgentRunContext, list[Message]] = {}
        self._broken: set[AgentRunContext] = set()

    # reading (blocking, short; from async code prefer trio.to_thread) ------

    def messages(self, session_id: str) -> list[Message]:
        """The stored messages as they are, without repair (unreadable rows as placeholders)."""
        return [read_row(row)[0] for row in self.store.rows(session_id)]

    def sessions(self) -> list[str]:
        """Stored session ids, oldest first."""
        return self.store.sessions()

    def plan_mode(self, session_id: str) -> str:
        """The session's last recorded Plan Mode state (``normal`` when none is)."""
        return self.store.plan_mode(session_id)

    def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """Recorded waits, oldest first (optionally of one session)."""
        return self.store.pending_approvals(session_id)

    def close(self) -> None:
        self.store.close()

    # ownership ----------------------------------------------------------------

    def _acquire(self, session_id: str) -> SessionLock:
        """Hold the session; a hold of a moment (an answer being recorded) is waited out."""
        deadline = time.monotonic() + _LOCK_PATIENCE
        while True:
            try:
                return self.store.lock_session(session_id)
            except SessionLocked:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def _release(self, context: AgentRunContext) -> None:
        held = self._held.get(context.session_id)
        if held is not None and held[0] is context:
            del self._held[context.session_id]
            held[1].release()

    # hooks --------------------------------------------------------------------

    async def on_tool(self, context: AgentRunContext) -> None:
        """Hold and restore the session; put Plan Mode back before the planner offers tools."""
        if context.agent.history is not None:
            raise TypeError(f"{type(self).__name__} keeps the history: create the agent with history=None")
        session_id = context.session_id
        lock = await trio.to_thread.run_sync(self._acquire, session_id)
        self._held[session_id] = (context, lock)
        waits = await trio.to_thread.run_sync(self.store.pending_approvals, session_id)
        refusal, gone = await _judge_agent(context, waits)
        # Refused: the waits end as a stopped process leaves them (no answer used), then the request fails.
        rules = {} if refusal is not None else self.wait_rules
        restored = await trio.to_thread.run_sync(restore_session, self.store, session_id, rules, gone)
        self._positions[context] = restored.next_position
        self._restored[context] = restored.messages
        for bad in restored.unreadable:
            await context.emit(StoredMessageUnreadableEvent(row_id=bad.row_id, reason=bad.reason))
        for wait, settled in restored.settled:
            await context.emit(ApprovalResumedEvent(tool_call_id=wait.tool_call_id, response_event=wait.response_event))
            for event in settled.events:
                await context.emit(event)
        if refusal is not None:
            raise refusal
        planners = [e for e in context.agent.extensions if isinstance(e, PlanModeExtension)]
        back = [planner.restore_plan_mode(session_id) for planner in planners if restored.plan_mode in _PLAN_ACTIVE]
        if any(back):
            await context.emit(PlanModeRestoredEvent())

    async def on_state(self, context: AgentRunContext) -> None:
        """Hand the restored (mended) history to the request."""
        for message in self._restored.pop(context, ()):
            context.add_message(message)

    async def _commit(self, context: AgentRunContext, change: SessionChange) -> None:
        """Apply ``change`` under a shield bounded by CLEANUP_SECONDS; a failure breaks the request's writes."""
        try:
            with trio.move_on_after(CLEANUP_SECONDS, shield=True) as scope:
                await trio.to_thread.run_sync(self.store.apply, context.session_id, change, abandon_on_cancel=True)
        except BaseException:
            self._broken.add(context)
            raise
        if scope.cancelled_caught:
            self._broken.add(context)
            raise StoreError(f"session {context.session_id!r}: a write was not confirmed within {CLEANUP_SECONDS} s")

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        """Store appended messages, waits, compactions and Plan Mode; let go of the session at the end."""
        if isinstance(event, (HistoryReplacedEvent, MessageAppendedEvent)):
            if context in self._broken:
                raise StoreError(f"session {context.session_id!r}: not stored, an earlier write of this request failed")
            if isinstance(event, HistoryReplacedEvent):
                self._positions[context] = len(event.messages)
                await self._commit(context, SessionChange(replace=tuple(event.messages)))
                return
            position = self._positions.get(context)
            if position is None:
                raise StoreError(f"session {context.session_id!r} was not restored by {self.name}")
            self._positions[context] = position + 1
            await self._commit(context, SessionChange(append=((position, event.message),)))
            return
        payload = event.payload
        if isinstance(payload.get("tool_call_id"), str) and isinstance(payload.get("response_event"), str):
            if isinstance(event, ApprovalResumedEvent):
                return
            # Recorded in this thread, with no checkpoint since the announcement was streamed:
            # no consumer can act on (or show) a question before it is stored. Approvals are rare.
            wait = PendingApproval(
                context.session_id,
                context.request_id,
                str(payload["tool_call_id"]),
                event.name,
                str(payload["response_event"]),
                dict(payload),
                None,
                time.time(),
                _fingerprint_text(context),
            )
            self.store.record_wait(wait)
            return
        if isinstance(event, TransitionEvent) and event.machine == PLAN_MODE.name:
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await trio.to_thread.run_sync(
                    self.store.apply, context.session_id, SessionChange(plan_mode=event.dest), abandon_on_cancel=True
                )
            return
        ended = isinstance(event, RunCancelledEvent) or (
            isinstance(event, TransitionEvent)
            and event.machine == REQUEST.name
            and event.region == REQUEST.main.name
            and event.dest in _FINAL_PHASES
        )
        if ended:
            await self._end(context)

    async def _end(self, context: AgentRunContext) -> None:
        self._positions.pop(context, None)
        self._restored.pop(context, None)
        self._broken.discard(context)
        if context.session_id not in self._held or self._held[context.session_id][0] is not context:
            return
        try:
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await trio.to_thread.run_sync(
                    self.store.forget_request, context.session_id, context.request_id, abandon_on_cancel=True
                )
        finally:
            self._release(context)

    # answers after a restart --------------------------------------------------

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Verdict:
        """Record an answer to a wait left by a stopped process, checked like a live answer; or say why not.

        While any runner holds the session, the event is for the extension that
        asked (this store says nothing), as is an event no wait rule names. An
        answer nothing stored waits for, one answered already, or one the check
        refuses is refused with the reason, and nothing changes.
        """
        payload = event.payload if isinstance(event.payload, Mapping) else None
        call_id = payload.get("tool_call_id") if payload is not None else None
        rule = self.wait_rules.get(event.name) if isinstance(event.name, str) else None
        if payload is None or not isinstance(call_id, str) or rule is None:
            return False
        try:
            lock = self.store.lock_session(config.session_id)
        except SessionLocked:
            return False
        try:
            problem = self._record_answer(config.session_id, call_id, event.name, rule, payload)
        finally:
            lock.release()
        if problem is None:
            return True
        log.info("refused %s for %s/%s: %s", event.name, config.session_id, call_id, problem)
        return Refusal(problem)

    def _record_answer(
        self, session_id: str, call_id: str, name: str, rule: WaitRule, payload: Mapping[str, Any]
    ) -> str | None:
        """Record a valid answer; why not otherwise."""
        waits = [w for w in self.store.pending_approvals(session_id) if w.tool_call_id == call_id]
        if not waits:
            return f"no stored waiting call tool_call_id={call_id!r} in session {session_id!r}"
        wait = waits[0]
        if wait.response_event != name:
            return f"stored call tool_call_id={call_id!r} waits for {wait.response_event!r}, not {name!r}"
        if wait.response is not None:
            return f"stored call tool_call_id={call_id!r} already has a response"
        problem = rule.validator(wait.payload)(payload)
        if problem is not None:
            return problem
        try:
            copied = json.loads(json.dumps(dict(payload)))
        except (TypeError, ValueError) as bad:
            return f"the answer cannot be stored: {bad}"
        if not self.store.record_response(session_id, call_id, name, copied):
            return f"stored call tool_call_id={call_id!r} already has a response"
        return None

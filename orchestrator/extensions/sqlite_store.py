"""SQLiteSessionStore: session history and pending approvals in one SQLite file.

Register the store as an extension and let it keep the history::

    store = SQLiteSessionStore("sessions.db")
    client = await create_agent(model, history=None, extensions=[store, AskUserExtension()])

Every appended message is written (and committed) from ``on_event`` before
the request goes on, so a killed process loses nothing it had appended.
``on_state`` restores the session and repairs what a killed process left
behind: a tool call without a result gets a cancelled ToolMessage ("not
completed: the process stopped"), stored too, so restored history is always
well-formed. A compaction pass (``Agent.compact``) is stored when it finishes.
Database work runs in worker threads on one connection guarded by a lock
(except the small write that records a pending approval, see ``on_event``).

Pending approvals: an event whose payload names a ``tool_call_id`` and a
``response_event`` (plan mode's ``enter_plan_mode`` / ``exit_plan_mode``,
``ask_user``) is recorded until its call gets a result or its request ends.
After a restart ``pending_approvals()`` lists what was waiting when the
process stopped, and the answer can still be given:

1. ``Agent.emit_external_event`` with the usual response event (for example
   ``ask_user_response`` ``{"tool_call_id": ..., "answer": ...}``) is accepted
   by the store while no request of that session runs; it is recorded.
2. The next request of the session resumes: its input is appended, then the
   assistant message that made the waiting call is replayed as the first model
   response (the model is not called), so its tool calls run again through
   every hook; when the waiting call asks again, the store answers it with the
   recorded response (and emits ``approval_resumed``). The call ends as if the
   process had never stopped, and the model continues from its result.

Calls of that message that had finished run again too. A request that starts
before any answer was recorded gets the waiting calls cancelled instead.

Plan Mode: every transition of a session's ``plan_mode`` machine is recorded.
When a session that was in Plan Mode (or waited for its plan's approval) is
continued by a process whose PlanModeExtension does not know it, ``on_tool``
restores Plan Mode there (``PlanModeExtension.restore_plan_mode``) and emits
``plan_mode_restored``, so the plan tools, the Plan Mode prompt and a waiting
``exit_plan_mode`` answer carry over a restart. One process should own a
session at a time.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

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
from orchestrator.extensions.base import AgentExtension, CallNextModel
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.messages import (
    AssistantMessage,
    ContentPart,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
)
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent

if TYPE_CHECKING:
    from orchestrator.context import AgentRunContext

__all__ = [
    "STOPPED",
    "ApprovalResumedEvent",
    "PendingApproval",
    "PlanModeRestoredEvent",
    "SQLiteSessionStore",
    "decode_message",
    "encode_message",
    "repair",
]

STOPPED = "not completed: the process stopped"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (session_id, position)
);
CREATE TABLE IF NOT EXISTS pending_approvals (
    session_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    event TEXT NOT NULL,
    response_event TEXT NOT NULL,
    payload TEXT NOT NULL,
    response TEXT,
    created REAL NOT NULL,
    PRIMARY KEY (session_id, tool_call_id)
);
CREATE TABLE IF NOT EXISTS session_modes (
    session_id TEXT PRIMARY KEY,
    plan_mode TEXT NOT NULL,
    updated REAL NOT NULL
);
"""

_FINAL_PHASES = REQUEST.main.final_states
# Plan Mode states a restart returns to Plan Mode (a waiting exit is withdrawn to plan_active,
# then asked again by the replay); a waiting entry is withdrawn to normal.
_PLAN_ACTIVE = frozenset({"plan_active", "exit_awaiting_approval"})

T = TypeVar("T")


@attrs.frozen
class PendingApproval:
    """A call that waits (or waited, before a restart) for an external response."""

    session_id: str
    request_id: str
    tool_call_id: str
    event: str
    response_event: str
    payload: Mapping[str, Any]
    response: Mapping[str, Any] | None
    created: float


@attrs.frozen(kw_only=True)
class ApprovalResumedEvent(AgentEvent):
    """A call that asked again after a restart got the response recorded for it."""

    kind: ClassVar[str] = "approval_resumed"
    tool_call_id: str
    response_event: str


@attrs.frozen(kw_only=True, repr=False)
class PlanModeRestoredEvent(AgentEvent):
    """The session was in Plan Mode when its last process stopped; Plan Mode is active again."""

    kind: ClassVar[str] = "plan_mode_restored"


# message codec ---------------------------------------------------------------


def _part_to_json(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    encoded = base64.b64encode(part.data).decode("ascii") if part.data is not None else None
    return {"type": "image", "url": part.url, "data": encoded, "media_type": part.media_type}


def _part_from_json(data: Mapping[str, Any]) -> ContentPart:
    if data["type"] == "text":
        return TextPart(data["text"])
    raw = base64.b64decode(data["data"]) if data.get("data") is not None else None
    return ImagePart(url=data.get("url"), data=raw, media_type=data["media_type"])


def encode_message(message: Message) -> str:
    """A message as JSON text."""
    body: dict[str, Any]
    if isinstance(message, SystemMessage):
        body = {"content": message.content}
    elif isinstance(message, UserMessage):
        content = message.content
        body = {"content": content if isinstance(content, str) else [_part_to_json(p) for p in content]}
    elif isinstance(message, AssistantMessage):
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
        body = {"content": message.content, "tool_calls": calls}
    else:
        body = {
            "tool_call_id": message.tool_call_id,
            "name": message.name,
            "content": message.content,
            "status": str(message.status),
        }
    return json.dumps({"role": message.role, **body}, ensure_ascii=False, default=str)


def decode_message(text: str) -> Message:
    """The message ``encode_message`` wrote."""
    data = json.loads(text)
    role = data["role"]
    if role == "system":
        return SystemMessage(data["content"])
    if role == "user":
        content = data["content"]
        return UserMessage(content if isinstance(content, str) else tuple(_part_from_json(p) for p in content))
    if role == "assistant":
        calls = tuple(ToolCall(c["id"], c["name"], dict(c["arguments"])) for c in data["tool_calls"])
        return AssistantMessage(data["content"], calls)
    if role == "tool":
        return ToolMessage(data["tool_call_id"], data["name"], data["content"], ToolStatus(data["status"]))
    raise ValueError(f"unknown message role {role!r}")


def repair(messages: Sequence[Message], keep_open: frozenset[str] = frozenset()) -> list[Message]:
    """``messages`` with a cancelled result after each unanswered tool call.

    A missing result is placed right after the results its assistant message
    did get. Calls named in ``keep_open`` are left without one.
    """
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    repaired: list[Message] = []
    missing: list[ToolCall] = []
    for message in messages:
        if missing and not isinstance(message, ToolMessage):
            repaired.extend(ToolMessage(c.id, c.name, STOPPED, ToolStatus.CANCELLED) for c in missing)
            missing = []
        repaired.append(message)
        if isinstance(message, AssistantMessage):
            missing = [c for c in message.tool_calls if c.id not in answered and c.id not in keep_open]
    repaired.extend(ToolMessage(c.id, c.name, STOPPED, ToolStatus.CANCELLED) for c in missing)
    return repaired


def _replayable(messages: Sequence[Message], answered: set[str]) -> int | None:
    """Index of the last assistant message when it has an unanswered call with a recorded response."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            results = {m.tool_call_id for m in messages[index + 1 :] if isinstance(m, ToolMessage)}
            tail_is_results = all(isinstance(m, ToolMessage) for m in messages[index + 1 :])
            waiting = {c.id for c in message.tool_calls if c.id not in results}
            return index if tail_is_results and waiting & answered else None
    return None


@attrs.frozen
class _Restored:
    messages: list[Message]
    replay: AssistantMessage | None = None


# the store -------------------------------------------------------------------


class SQLiteSessionStore(AgentExtension):
    """Durable session history and pending approvals in SQLite (use with ``history=None``)."""

    priority = -100

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "FULL") -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"unknown synchronous mode {synchronous!r}")
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self._db.executescript(_SCHEMA)
        self._open_calls: dict[str, set[str]] = {}
        self._live: set[str] = set()
        self._replays: dict[str, AssistantMessage] = {}
        # Appended messages not yet committed, in the order they were appended (see on_event).
        self._unwritten: collections.deque[tuple[str, Message]] = collections.deque()

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(fn, *args)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and one immediate transaction (the caller holds no lock)."""
        with self._lock, self._begin() as db:
            yield db

    @contextmanager
    def _begin(self) -> Iterator[sqlite3.Connection]:
        """One immediate transaction (the caller holds the lock)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            try:
                self._write_unwritten()
            finally:
                self._db.close()

    # reading (blocking, short; from async code prefer trio.to_thread) ------

    def messages(self, session_id: str) -> list[Message]:
        """The stored messages as they are, without repair."""
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM messages WHERE session_id = ? ORDER BY position", (session_id,)
            ).fetchall()
        return [decode_message(body) for (body,) in rows]

    def sessions(self) -> list[str]:
        """Stored session ids, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id FROM messages GROUP BY session_id ORDER BY MIN(created)"
            ).fetchall()
        return [session_id for (session_id,) in rows]

    def plan_mode(self, session_id: str) -> str:
        """The session's last recorded Plan Mode state (``normal`` when none is)."""
        with self._lock:
            row = self._db.execute("SELECT plan_mode FROM session_modes WHERE session_id = ?", (session_id,)).fetchone()
        return str(row[0]) if row else "normal"

    def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """Recorded waits, oldest first (optionally of one session)."""
        query = (
            "SELECT session_id, request_id, tool_call_id, event, response_event, payload, response, created "
            "FROM pending_approvals"
        )
        params: tuple[str, ...] = ()
        if session_id is not None:
            query += " WHERE session_id = ?"
            params = (session_id,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created, rowid", params).fetchall()
        return [
            PendingApproval(sid, rid, call_id, event, response_event, json.loads(payload), _loads(response), created)
            for sid, rid, call_id, event, response_event, payload, response, created in rows
        ]

    # writing (run in worker threads by the hooks) -------------------------

    def _write_appended(self) -> None:
        with self._lock:
            self._write_unwritten()

    def _write_unwritten(self) -> None:
        """Commit each queued message, oldest first (the caller holds the lock).

        A message leaves the queue only once committed, so a failed write is
        retried by the next one, still in order.
        """
        while self._unwritten:
            session_id, message = self._unwritten[0]
            self._append(session_id, message)
            self._unwritten.popleft()

    def _append(self, session_id: str, message: Message) -> None:
        """Commit one message (the caller holds the lock)."""
        body = encode_message(message)
        with self._begin() as db:
            db.execute(
                "INSERT INTO messages (session_id, position, role, body, created) "
                "SELECT ?, COALESCE(MAX(position) + 1, 0), ?, ?, ? FROM messages WHERE session_id = ?",
                (session_id, message.role, body, time.time(), session_id),
            )
            if isinstance(message, ToolMessage):
                db.execute(
                    "DELETE FROM pending_approvals WHERE session_id = ? AND tool_call_id = ?",
                    (session_id, message.tool_call_id),
                )
            self._track(session_id, message)

    def _replace(self, session_id: str, messages: Sequence[Message]) -> None:
        """Make ``messages`` the session's history; its queued appends are part of them."""
        rows = [(session_id, i, m.role, encode_message(m), time.time()) for i, m in enumerate(messages)]
        with self._lock:
            with self._begin() as db:
                db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
                db.executemany(
                    "INSERT INTO messages (session_id, position, role, body, created) VALUES (?, ?, ?, ?, ?)", rows
                )
            others = [entry for entry in self._unwritten if entry[0] != session_id]
            self._unwritten.clear()
            self._unwritten.extend(others)

    def _track(self, session_id: str, message: Message) -> None:
        """Remember calls appended here and not yet answered (they run in this process)."""
        if isinstance(message, AssistantMessage) and message.tool_calls:
            self._open_calls.setdefault(session_id, set()).update(c.id for c in message.tool_calls)
        elif isinstance(message, ToolMessage):
            open_calls = self._open_calls.get(session_id)
            if open_calls is not None:
                open_calls.discard(message.tool_call_id)
                if not open_calls:
                    del self._open_calls[session_id]

    def _restore(self, session_id: str, resume: bool) -> _Restored:
        """Load, repair and store the repair; hold back a message to replay when ``resume``."""
        with self._lock:
            self._write_unwritten()
        with self._transaction() as db:
            rows = db.execute(
                "SELECT position, body FROM messages WHERE session_id = ? ORDER BY position", (session_id,)
            ).fetchall()
            answered = {
                call_id
                for (call_id,) in db.execute(
                    "SELECT tool_call_id FROM pending_approvals WHERE session_id = ? AND response IS NOT NULL",
                    (session_id,),
                )
            }
            stored = [decode_message(body) for _, body in rows]
            running = self._open_calls.get(session_id, set())
            replay: AssistantMessage | None = None
            at = _replayable(stored, answered) if resume else None
            if at is not None:
                held = stored[at]
                assert isinstance(held, AssistantMessage)
                replay = held
                db.execute("DELETE FROM messages WHERE session_id = ? AND position >= ?", (session_id, rows[at][0]))
                stored = stored[:at]
            keep_open = frozenset(running) if resume else frozenset(running | answered)
            repaired = repair(stored, keep_open)
            if repaired[: len(stored)] == stored:
                base = rows[len(stored) - 1][0] + 1 if stored else 0
                extra = repaired[len(stored) :]
                db.executemany(
                    "INSERT INTO messages (session_id, position, role, body, created) VALUES (?, ?, ?, ?, ?)",
                    [(session_id, base + i, m.role, encode_message(m), time.time()) for i, m in enumerate(extra)],
                )
            else:
                db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
                db.executemany(
                    "INSERT INTO messages (session_id, position, role, body, created) VALUES (?, ?, ?, ?, ?)",
                    [(session_id, i, m.role, encode_message(m), time.time()) for i, m in enumerate(repaired)],
                )
            cancelled = [(session_id, m.tool_call_id) for m in repaired if isinstance(m, ToolMessage)]
            db.executemany("DELETE FROM pending_approvals WHERE session_id = ? AND tool_call_id = ?", cancelled)
        return _Restored(repaired, replay)

    def _record_wait(self, context_ids: tuple[str, str], event: AgentEvent) -> dict[str, Any] | None:
        """Record the wait ``event`` announces; the response recorded for it earlier, if any."""
        session_id, request_id = context_ids
        payload = event.payload
        call_id, response_event = payload["tool_call_id"], payload["response_event"]
        body = json.dumps(dict(payload), default=_plain, ensure_ascii=False)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO pending_approvals "
                "(session_id, tool_call_id, request_id, event, response_event, payload, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (session_id, tool_call_id) DO UPDATE SET request_id = excluded.request_id, "
                "event = excluded.event, response_event = excluded.response_event, payload = excluded.payload",
                (session_id, call_id, request_id, event.name, response_event, body, time.time()),
            )
            row = db.execute(
                "SELECT response FROM pending_approvals WHERE session_id = ? AND tool_call_id = ?",
                (session_id, call_id),
            ).fetchone()
        return _loads(row[0]) if row else None

    def _record_plan_mode(self, session_id: str, state: str) -> None:
        with self._transaction() as db:
            if state == "normal":
                db.execute("DELETE FROM session_modes WHERE session_id = ?", (session_id,))
            else:
                db.execute(
                    "INSERT INTO session_modes (session_id, plan_mode, updated) VALUES (?, ?, ?) "
                    "ON CONFLICT (session_id) DO UPDATE SET plan_mode = excluded.plan_mode, updated = excluded.updated",
                    (session_id, state, time.time()),
                )

    def _forget_request(self, session_id: str, request_id: str) -> None:
        with self._transaction() as db:
            db.execute(
                "DELETE FROM pending_approvals WHERE session_id = ? AND request_id = ? AND response IS NULL",
                (session_id, request_id),
            )

    # hooks ----------------------------------------------------------------

    async def on_tool(self, context: AgentRunContext) -> None:
        """Restore Plan Mode a stopped process left the session in (before the planner offers tools)."""
        planners = [e for e in context.agent.extensions if isinstance(e, PlanModeExtension)]
        if not planners:
            return
        recorded = await self._in_thread(self.plan_mode, context.session_id)
        if recorded not in _PLAN_ACTIVE:
            return
        restored = [planner.restore_plan_mode(context.session_id) for planner in planners]
        if any(restored):
            await context.emit(PlanModeRestoredEvent())

    async def on_state(self, context: AgentRunContext) -> None:
        """Restore the session (repaired); a resumed wait's message is held for replay."""
        if context.agent.history is not None:
            raise TypeError("SQLiteSessionStore keeps the history: create the agent with history=None")
        resume = context.input_message is not None
        with self._lock:
            self._live.add(context.session_id)
        restored = await self._in_thread(self._restore, context.session_id, resume)
        for message in restored.messages:
            context.add_message(message)
        if restored.replay is not None:
            self._replays[context.request_id] = restored.replay

    async def on_model_request(
        self, context: AgentRunContext, request: ModelRequest, call_next: CallNextModel
    ) -> AsyncIterator[ModelEvent]:
        """Answer the first model call of a resumed request with the held-back message."""
        replay = self._replays.pop(context.request_id, None)
        if replay is not None:
            yield ResponseCompletedEvent(replay)
            return
        stream = call_next(request)
        try:
            async for event in stream:
                yield event
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        """Store appended messages, waits and compactions; forget a request's waits when it ends."""
        if isinstance(event, HistoryReplacedEvent):
            await self._in_thread(self._replace, context.session_id, event.messages)
            return
        if isinstance(event, MessageAppendedEvent):
            # Queued before any checkpoint, in the order of appending: concurrent tool calls
            # whose worker threads reach the database out of order still commit in that order.
            self._unwritten.append((context.session_id, event.message))
            await self._in_thread(self._write_appended)
            return
        payload = event.payload
        if isinstance(payload.get("tool_call_id"), str) and isinstance(payload.get("response_event"), str):
            if isinstance(event, ApprovalResumedEvent):
                return
            # Recorded in this thread, with no checkpoint since the announcement was streamed:
            # no consumer can act on (or show) a question before it is stored. Approvals are rare.
            response = self._record_wait((context.session_id, context.request_id), event)
            if response is not None:
                await self._answer(context, event, response)
            return
        if not isinstance(event, (TransitionEvent, RunCancelledEvent)):
            return
        if isinstance(event, TransitionEvent) and event.machine == PLAN_MODE.name:
            await self._in_thread(self._record_plan_mode, context.session_id, event.dest)
            return
        ended = isinstance(event, RunCancelledEvent) or (
            event.machine == REQUEST.name and event.region == REQUEST.main.name and event.dest in _FINAL_PHASES
        )
        if ended:
            self._replays.pop(context.request_id, None)
            with self._lock:
                self._live.discard(context.session_id)
            await self._in_thread(self._forget_request, context.session_id, context.request_id)

    async def _answer(self, context: AgentRunContext, event: AgentEvent, response: Mapping[str, Any]) -> None:
        response_event = str(event.payload["response_event"])
        call_id = str(event.payload["tool_call_id"])
        config = AgentRunConfig(context.session_id, context.request_id)
        taken = context.agent.emit_external_event(ExternalEvent(response_event, dict(response)), config=config)
        if taken:
            await context.emit(ApprovalResumedEvent(tool_call_id=call_id, response_event=response_event))

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Verdict:
        """Record a response to a wait left by a stopped process (no request of the session runs), or say why not.

        While a request of the session runs, the event is for the extension that
        asked (this store says nothing); an event without a ``tool_call_id`` is
        not a response.
        """
        call_id = event.payload.get("tool_call_id") if isinstance(event.payload, Mapping) else None
        if not isinstance(call_id, str):
            return False
        with self._lock:
            if config.session_id in self._live:
                return False
            row = self._db.execute(
                "SELECT response_event, response FROM pending_approvals WHERE session_id = ? AND tool_call_id = ?",
                (config.session_id, call_id),
            ).fetchone()
            if row is None:
                return Refusal(f"no stored waiting call tool_call_id={call_id!r} in session {config.session_id!r}")
            if row[0] != event.name:
                return Refusal(f"stored call tool_call_id={call_id!r} waits for {row[0]!r}, not {event.name!r}")
            if row[1] is not None:
                return Refusal(f"stored call tool_call_id={call_id!r} already has a response")
            self._db.execute(
                "UPDATE pending_approvals SET response = ? WHERE session_id = ? AND tool_call_id = ?",
                (json.dumps(dict(event.payload), default=_plain), config.session_id, call_id),
            )
        return True


def _loads(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None


def _plain(value: object) -> object:
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)

"""Sessions in this process's memory.

``InMemoryHistory`` (the Agent's default history) lives in ``orchestrator.history``
and is re-exported here. ``MemoryStore`` is the full store interface in memory:
what a test or a single short-lived process needs, with nothing surviving it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs

from orchestrator.history import InMemoryHistory, SessionHistory
from orchestrator.messages import ToolMessage
from orchestrator.store.codec import encode_message
from orchestrator.store.errors import StoreError
from orchestrator.store.interface import (
    PendingApproval,
    Quarantined,
    SessionChange,
    SessionLock,
    SessionStore,
    StoredRow,
)
from orchestrator.store.locks import ProcessLocks

__all__ = ["InMemoryHistory", "MemoryStore", "SessionHistory"]


class MemoryStore(SessionStore):
    """The session store interface in memory (one process, nothing durable)."""

    where = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, list[StoredRow]] = {}
        self._started: dict[str, float] = {}
        self._active: dict[str, float] = {}  # each session's last change
        self._approvals: dict[tuple[str, str], PendingApproval] = {}
        self._modes: dict[str, str] = {}
        self._next_row = 1
        self._locks = ProcessLocks(self.where)
        self._quarantined: list[Quarantined] = []

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted((s for s, rows in self._rows.items() if rows), key=lambda s: self._started[s])

    def rows(self, session_id: str) -> list[StoredRow]:
        with self._lock:
            return list(self._rows.get(session_id, ()))

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            found = bool(self._rows.pop(session_id, None)) | (self._modes.pop(session_id, None) is not None)
            self._started.pop(session_id, None)
            self._active.pop(session_id, None)
            for key in [key for key in self._approvals if key[0] == session_id]:
                del self._approvals[key]
                found = True
            kept = [q for q in self._quarantined if q.session_id != session_id]
            found |= len(kept) != len(self._quarantined)
            self._quarantined = kept
        return found

    def apply(self, session_id: str, change: SessionChange) -> None:
        try:
            replacing = None if change.replace is None else [encode_message(m) for m in change.replace]
            appending = [(position, m.role, encode_message(m)) for position, m in change.append]
            quarantine = [(u, encode_message(u.placeholder)) for u in change.quarantine]
        except (TypeError, ValueError) as bad:
            raise StoreError(f"a message of session {session_id!r} cannot be stored: {bad}") from bad
        with self._lock:
            rows = list(self._rows.get(session_id, ()))
            for unreadable, body in quarantine:
                for i, row in enumerate(rows):
                    if row.row_id == unreadable.row_id:
                        self._quarantined.append(
                            Quarantined(row.row_id, session_id, row.position, row.body, unreadable.reason)
                        )
                        rows[i] = attrs.evolve(row, body=body)
            next_row = self._next_row
            if replacing is not None and change.replace is not None:
                rows = []
                for position, (message, body) in enumerate(zip(change.replace, replacing, strict=True)):
                    rows.append(StoredRow(next_row, position, message.role, body))
                    next_row += 1
            taken = {row.position for row in rows}
            for position, role, body in appending:
                if position in taken:
                    raise StoreError(f"position {position} of session {session_id!r} is already taken")
                taken.add(position)
                rows.append(StoredRow(next_row, position, role, body))
                next_row += 1
            rows.sort(key=lambda row: row.position)
            self._next_row = next_row
            self._rows[session_id] = rows
            if rows:
                self._started.setdefault(session_id, time.time())
            self._active[session_id] = time.time()
            ended = set(change.drop_approvals)
            ended.update(m.tool_call_id for _, m in change.append if isinstance(m, ToolMessage))
            for call_id in ended:
                self._approvals.pop((session_id, call_id), None)
            if change.plan_mode == "normal":
                self._modes.pop(session_id, None)
            elif change.plan_mode is not None:
                self._modes[session_id] = change.plan_mode

    def quarantined(self, session_id: str | None = None) -> list[Quarantined]:
        with self._lock:
            return [q for q in self._quarantined if session_id in (None, q.session_id)]

    def idle_sessions(self, idle_before: float) -> list[str]:
        with self._lock:
            waiting = {session_id for session_id, _ in self._approvals}
            return sorted(s for s, last in self._active.items() if last < idle_before and s not in waiting)

    def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        with self._lock:
            found = [w for w in self._approvals.values() if session_id in (None, w.session_id)]
        return sorted(found, key=lambda w: w.created)

    def record_wait(self, wait: PendingApproval) -> None:
        with self._lock:
            self._approvals.pop((wait.session_id, wait.tool_call_id), None)
            self._approvals[(wait.session_id, wait.tool_call_id)] = attrs.evolve(wait, response=None)
            self._active[wait.session_id] = time.time()

    def record_response(
        self, session_id: str, tool_call_id: str, response_event: str, response: Mapping[str, Any]
    ) -> bool:
        with self._lock:
            wait = self._approvals.get((session_id, tool_call_id))
            if wait is None or wait.response_event != response_event or wait.response is not None:
                return False
            self._approvals[(session_id, tool_call_id)] = attrs.evolve(wait, response=dict(response))
            return True

    def forget_request(self, session_id: str, request_id: str) -> None:
        with self._lock:
            for key, wait in list(self._approvals.items()):
                if (wait.session_id, wait.request_id) == (session_id, request_id) and wait.response is None:
                    del self._approvals[key]

    def plan_mode(self, session_id: str) -> str:
        with self._lock:
            return self._modes.get(session_id, "normal")

    def lock_session(self, session_id: str) -> SessionLock:
        return self._locks.acquire(session_id)

    def close(self) -> None:
        self._locks.release_all()

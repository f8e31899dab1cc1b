"""SQLiteStore: the session store interface in one SQLite file.

One connection in WAL mode, guarded by a lock; every change is one immediate
transaction. The schema carries its version (table ``schema_version``) and is
migrated forward when a file written by an earlier version is opened: a file
without that table gets every table it lacks. A file that cannot be made or
opened is UnusableLocation, with the path and the system's reason. Session
locks are kernel file locks in ``<path>.locks/`` (see
``orchestrator.store.locks``), so a second process running a session is
refused and a killed one blocks nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from orchestrator.store.codec import change_rows, json_default, json_object
from orchestrator.store.errors import SchemaTooNew, SchemaUnrecognised, SessionCarried, StoreError, UnusableLocation
from orchestrator.store.interface import (
    PendingApproval,
    Quarantined,
    SessionChange,
    SessionLock,
    SessionStore,
    StoredRow,
)
from orchestrator.store.locks import FileLocks, ProcessLocks
from orchestrator.store.metrics import measured
from orchestrator.text import clean_text

__all__ = ["SCHEMA_VERSION", "SQLiteStore", "open_sqlite", "refuse_newer_sessions", "sessions_with_recorded_waits"]

_V1 = """
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

_V2 = """
CREATE TABLE IF NOT EXISTS unreadable_rows (
    row_id INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    body TEXT NOT NULL,
    reason TEXT NOT NULL,
    found REAL NOT NULL
);
"""

_V3 = """
ALTER TABLE pending_approvals ADD COLUMN fingerprint TEXT;
"""

# Each entry migrates from the version before it; a new version appends one.
_MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)
SCHEMA_VERSION = len(_MIGRATIONS)

IDLE_SESSIONS = (
    "SELECT session_id FROM (SELECT session_id, MAX(created) AS last FROM {prefix}messages GROUP BY session_id"
    " UNION ALL SELECT session_id, MAX(updated) FROM {prefix}session_modes GROUP BY session_id) AS known"
    " WHERE session_id NOT IN (SELECT session_id FROM {prefix}pending_approvals)"
    " GROUP BY session_id HAVING MAX(last) < ? ORDER BY session_id"
)
"""Sessions idle since before the one parameter, without a recorded wait (shared with the PostgreSQL store)."""

_INSERT = "INSERT INTO messages (session_id, position, role, body, created) VALUES (?, ?, ?, ?, ?)"


def open_sqlite(path: str, prepare: Callable[[sqlite3.Connection], None], **connect: Any) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` (its directory made first) on which ``prepare`` ran.

    A file that cannot be made, opened or written is UnusableLocation naming the path and the
    system's reason; StoreErrors of ``prepare`` (a schema it refuses) pass as they are.
    """
    in_memory = path == ":memory:" or path.startswith("file:")
    if not in_memory:
        directory = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(directory, exist_ok=True)
        except FileExistsError:  # a part of the path is a file
            raise UnusableLocation(path, f"{directory} is not a directory") from None
        except OSError as failed:
            raise UnusableLocation(path, f"{failed.filename or directory}: {failed.strerror or failed}") from None
    db: sqlite3.Connection | None = None
    try:
        db = sqlite3.connect(path, **connect)
        prepare(db)
    except sqlite3.Error as failed:
        if db is not None:
            db.close()
        raise UnusableLocation(path, _os_reason(path, failed)) from None
    except BaseException:
        if db is not None:
            db.close()
        raise
    return db


def refuse_newer_sessions(db: sqlite3.Connection, path: str) -> None:
    """SchemaTooNew when the session tables of the file ``path`` were written by a newer version of this library:
    a run store on the file shares their ``messages`` table, so it refuses the file as the session store does."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone() is None:
        return
    rows = db.execute("SELECT version FROM schema_version").fetchall()
    if len(rows) == 1 and isinstance(rows[0][0], int) and rows[0][0] > SCHEMA_VERSION:
        raise SchemaTooNew(path, int(rows[0][0]), SCHEMA_VERSION)


def _os_reason(path: str, failed: sqlite3.Error) -> str:
    """Why ``path`` cannot be used: the system's reason when opening it for writing fails, else SQLite's."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as refused:
        return refused.strerror or str(refused)
    os.close(fd)
    return str(failed)


class SQLiteStore(SessionStore):
    """Sessions in one SQLite file (``:memory:`` keeps them in this process only)."""

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "FULL") -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"unknown synchronous mode {synchronous!r}")
        self.path = os.fspath(path)
        self.where = self.path
        self._lock = threading.Lock()

        def prepare(db: sqlite3.Connection) -> None:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            db.execute("PRAGMA busy_timeout=10000")
            self._migrate(db)

        self._db = open_sqlite(self.path, prepare, check_same_thread=False, isolation_level=None)
        in_memory = self.path == ":memory:" or self.path.startswith("file:")
        self._locks = ProcessLocks(self.path) if in_memory else FileLocks(self.path + ".locks", self.path)

    @property
    def connection(self) -> sqlite3.Connection:
        """The one connection (hold no transaction open on it)."""
        return self._db

    @contextmanager
    def _transaction(self, operation: str = "other") -> Iterator[sqlite3.Connection]:
        """One immediate transaction, its duration measured as ``operation`` (``orchestrator.store.metrics``)."""
        with measured("sqlite", operation, "sessions"), self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _migrate(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            rows = db.execute("SELECT version FROM schema_version").fetchall()
            if len(rows) > 1 or (rows and not isinstance(rows[0][0], int)):
                found = ", ".join(repr(row[0]) for row in rows)
                raise SchemaUnrecognised(self.path, f"table schema_version holds {found}", "one whole version number")
            if rows:
                version = int(rows[0][0])
            else:
                # A file without the table: version 1's tables are made if missing (a run store's file
                # has only its ``messages``), and every later migration follows.
                version = 0
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(self.path, version, SCHEMA_VERSION)
            for script in _MIGRATIONS[version:]:
                for statement in script.split(";"):
                    if statement.strip():
                        db.execute(statement)
            db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def schema_version(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT version FROM schema_version").fetchone()
        return int(row[0])

    def close(self) -> None:
        self._locks.release_all()
        with self._lock:
            self._db.close()

    # sessions and messages --------------------------------------------------

    def sessions(self) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id FROM messages GROUP BY session_id ORDER BY MIN(created)"
            ).fetchall()
        return [str(session_id) for (session_id,) in rows]

    def rows(self, session_id: str) -> list[StoredRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, position, role, body FROM messages WHERE session_id = ? ORDER BY position",
                (session_id,),
            ).fetchall()
        return [StoredRow(int(r), int(p), str(role), str(body)) for r, p, role, body in rows]

    def quarantined(self, session_id: str | None = None) -> list[Quarantined]:
        query = "SELECT row_id, session_id, position, body, reason FROM unreadable_rows"
        params: tuple[str, ...] = ()
        if session_id is not None:
            query, params = query + " WHERE session_id = ?", (session_id,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY found, rowid", params).fetchall()
        return [Quarantined(int(r), str(s), int(p), str(b), str(why)) for r, s, p, b, why in rows]

    def idle_sessions(self, idle_before: float) -> list[str]:
        with self._lock:
            rows = self._db.execute(IDLE_SESSIONS.format(prefix=""), (idle_before,)).fetchall()
        return [str(session_id) for (session_id,) in rows]

    def delete_session(self, session_id: str) -> bool:
        found = 0
        with self._transaction("delete_session") as db:
            for table in ("messages", "pending_approvals", "session_modes", "unreadable_rows"):
                found += db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,)).rowcount
        return found > 0

    def apply(self, session_id: str, change: SessionChange) -> None:
        now = time.time()
        rows = change_rows(session_id, change, now)
        try:
            with self._transaction("apply") as db:
                for unreadable, body in rows.quarantine:
                    db.execute(
                        "INSERT INTO unreadable_rows (row_id, session_id, position, body, reason, found) "
                        "SELECT rowid, session_id, position, body, ?, ? FROM messages "
                        "WHERE rowid = ? AND session_id = ?",
                        (unreadable.reason, now, unreadable.row_id, session_id),
                    )
                    db.execute(
                        "UPDATE messages SET body = ? WHERE rowid = ? AND session_id = ?",
                        (body, unreadable.row_id, session_id),
                    )
                if rows.replace is not None:
                    db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
                    db.executemany(_INSERT, rows.replace)
                db.executemany(_INSERT, rows.append)
                db.executemany(
                    "DELETE FROM pending_approvals WHERE session_id = ? AND tool_call_id = ?",
                    [(session_id, call_id) for call_id in rows.ended],
                )
                if change.plan_mode == "normal":
                    db.execute("DELETE FROM session_modes WHERE session_id = ?", (session_id,))
                elif change.plan_mode is not None:
                    db.execute(
                        "INSERT INTO session_modes (session_id, plan_mode, updated) VALUES (?, ?, ?) ON CONFLICT "
                        "(session_id) DO UPDATE SET plan_mode = excluded.plan_mode, updated = excluded.updated",
                        (session_id, change.plan_mode, now),
                    )
        except sqlite3.IntegrityError as clash:
            raise StoreError(f"session {session_id!r}: {clash} (is another writer running it?)") from clash
        except sqlite3.Error as failed:
            raise StoreError(f"session {session_id!r} could not be written to {self.path}: {failed}") from failed

    # approvals --------------------------------------------------------------

    def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        query = (
            "SELECT session_id, request_id, tool_call_id, event, response_event, payload, response, created,"
            " fingerprint FROM pending_approvals"
        )
        params: tuple[str, ...] = ()
        if session_id is not None:
            query, params = query + " WHERE session_id = ?", (session_id,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created, rowid", params).fetchall()
        found = []
        for sid, rid, call_id, event, response_event, payload, response, created, fingerprint in rows:
            asked = json_object(payload)
            found.append(
                PendingApproval(
                    sid, rid, call_id, event, response_event, asked or {}, json_object(response), created, fingerprint
                )
            )
        return found

    def record_wait(self, wait: PendingApproval) -> None:
        body = json.dumps(dict(wait.payload), default=json_default, ensure_ascii=False)
        with self._transaction("record_wait") as db:
            db.execute(
                "INSERT INTO pending_approvals "
                "(session_id, tool_call_id, request_id, event, response_event, payload, created, fingerprint) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (session_id, tool_call_id) DO UPDATE SET request_id = excluded.request_id, "
                "event = excluded.event, response_event = excluded.response_event, payload = excluded.payload, "
                "fingerprint = excluded.fingerprint, response = NULL",
                (
                    wait.session_id,
                    wait.tool_call_id,
                    wait.request_id,
                    wait.event,
                    wait.response_event,
                    clean_text(body),
                    wait.created,
                    wait.fingerprint,
                ),
            )

    def record_response(
        self, session_id: str, tool_call_id: str, response_event: str, response: Mapping[str, Any]
    ) -> bool:
        body = clean_text(json.dumps(dict(response), default=json_default, ensure_ascii=False))
        with self._transaction("record_response") as db:
            changed = db.execute(
                "UPDATE pending_approvals SET response = ? WHERE session_id = ? AND tool_call_id = ? "
                "AND response_event = ? AND response IS NULL",
                (body, session_id, tool_call_id, response_event),
            ).rowcount
        return bool(changed)

    def forget_request(self, session_id: str, request_id: str) -> None:
        with self._transaction("forget_request") as db:
            db.execute(
                "DELETE FROM pending_approvals WHERE session_id = ? AND request_id = ? AND response IS NULL",
                (session_id, request_id),
            )

    # modes and ownership ----------------------------------------------------

    def plan_mode(self, session_id: str) -> str:
        with self._lock:
            row = self._db.execute("SELECT plan_mode FROM session_modes WHERE session_id = ?", (session_id,)).fetchone()
        return str(row[0]) if row else "normal"

    def lock_session(self, session_id: str) -> SessionLock:
        """Hold the session: SessionLocked while another holder has its lock file, SessionCarried while the run
        store of this file has a run of it that has not ended (a parked run holds no lock, yet owns the session)."""
        lock = self._locks.acquire(session_id)
        try:
            carried = self._unended_run(session_id)
        except BaseException:
            lock.release()
            raise
        if carried is not None:
            lock.release()
            raise SessionCarried(session_id, self.path, *carried)
        return lock

    def _unended_run(self, session_id: str) -> tuple[str, str] | None:
        """The request id and status of the run store's run of ``session_id`` that has not ended, if any."""
        with self._lock:
            if not self._db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'orchestrator_runs'"
            ).fetchone():
                return None
            row = self._db.execute(
                "SELECT request_id, status FROM orchestrator_runs WHERE session_id = ?"
                " AND status IN ('queued', 'running', 'parked') LIMIT 1",
                (session_id,),
            ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))


def sessions_with_recorded_waits(path: str) -> list[str]:
    """The sessions of the SQLite file ``path`` with a wait the session store recorded (``pending_approvals``),
    oldest first; none when the file has no such table. Only a session store (``chat``) takes those answers."""
    with contextlib.closing(open_sqlite(path, lambda db: None, timeout=10)) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pending_approvals'").fetchone():
            return []
        rows = db.execute(
            "SELECT session_id FROM pending_approvals GROUP BY session_id ORDER BY MIN(created), session_id"
        ).fetchall()
    return [str(session_id) for (session_id,) in rows]

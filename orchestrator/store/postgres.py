"""PostgresStore: the session store interface on PostgreSQL.

Needs the ``postgres`` extra (``pip install 'orchestrator[postgres]'``: psycopg 3).
psycopg's asynchronous API needs asyncio, so this store uses its synchronous
API on one connection guarded by a lock, and the runtime calls it through
``trio.to_thread`` like every store. Each change is one transaction. Tables are
named ``orchestrator_*`` so they can share a database with an application; the
schema carries its version (``orchestrator_schema_version``) and is migrated
forward under a transaction-scoped advisory lock, so processes starting
together migrate once.

Session locks are session-level advisory locks held by the store's connection:
the server drops them when the connection ends, so a killed process blocks
nothing once its connection is gone (at once for a killed process, whose
kernel closes the socket). Two runners in one process are told apart by the
store as well.

A connection that breaks (the server restarted, a proxy dropped it) fails the
call it broke in with StoreUnavailable; the next call connects again and takes
the store's session locks again. A session whose lock another process took
meanwhile is lost to this store: every call for it raises SessionLost until its
lock is released (its runner ends), so two processes never write one session.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from orchestrator.store.codec import change_rows, json_default, json_object
from orchestrator.store.errors import (
    SchemaTooNew,
    SessionLocked,
    SessionLost,
    StoreError,
    StoreUnavailable,
    one_line,
)
from orchestrator.store.interface import (
    PendingApproval,
    Quarantined,
    SessionChange,
    SessionLock,
    SessionStore,
    StoredRow,
)
from orchestrator.store.locks import ProcessLocks
from orchestrator.store.metrics import measured
from orchestrator.store.sqlite import IDLE_SESSIONS
from orchestrator.text import clean_text

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

_V1 = (
    """CREATE TABLE orchestrator_messages (
        row_id BIGSERIAL PRIMARY KEY,
        session_id TEXT NOT NULL,
        position BIGINT NOT NULL,
        role TEXT NOT NULL,
        body TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        UNIQUE (session_id, position)
    )""",
    """CREATE TABLE orchestrator_pending_approvals (
        seq BIGSERIAL,
        session_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        event TEXT NOT NULL,
        response_event TEXT NOT NULL,
        payload TEXT NOT NULL,
        response TEXT,
        created DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, tool_call_id)
    )""",
    """CREATE TABLE orchestrator_session_modes (
        session_id TEXT PRIMARY KEY,
        plan_mode TEXT NOT NULL,
        updated DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE orchestrator_unreadable_rows (
        seq BIGSERIAL PRIMARY KEY,
        row_id BIGINT NOT NULL,
        session_id TEXT NOT NULL,
        position BIGINT NOT NULL,
        body TEXT NOT NULL,
        reason TEXT NOT NULL,
        found DOUBLE PRECISION NOT NULL
    )""",
)

_V2 = ("ALTER TABLE orchestrator_pending_approvals ADD COLUMN fingerprint TEXT",)

# Each entry migrates from the version before it; a new version appends one.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2)
SCHEMA_VERSION = len(_MIGRATIONS)
_MIGRATION_LOCK = int.from_bytes(b"orchmigr", "big") & 0x7FFFFFFFFFFFFFFF

_INSERT = "INSERT INTO orchestrator_messages (session_id, position, role, body, created) VALUES (%s, %s, %s, %s, %s)"


def _lock_key(session_id: str) -> int:
    """A signed 64-bit advisory lock key for the session."""
    digest = hashlib.sha256(b"orchestrator session " + session_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _without_password(dsn: str) -> str:
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.hostname or ""
    netloc = f"{parts.username}@{host}" if parts.username else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


class _AdvisoryLock(SessionLock):
    def __init__(self, store: PostgresStore, session_id: str, key: int, local: SessionLock) -> None:
        self._store = store
        self.session_id = session_id
        self._key = key
        self._local = local
        self._released = False
        self._guard = threading.Lock()

    def release(self) -> None:
        with self._guard:
            if self._released:
                return
            self._released = True
        try:
            self._store._unlock(self)
        finally:
            self._local.release()


class PostgresStore(SessionStore):
    """Sessions in a PostgreSQL database, given by a libpq connection string or URL."""

    def __init__(self, dsn: str, *, connect_timeout: int = 10) -> None:
        self.where = _without_password(dsn)
        self._dsn = dsn
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._closed = False
        self._db = self._connect()
        self._local = ProcessLocks(self.where)
        self._advisory: set[_AdvisoryLock] = set()
        # Sessions whose lock another process took while this store's connection was down.
        self._lost: set[str] = set()
        try:
            self._migrate()
        except BaseException:
            self._db.close()
            raise

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            return psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=self._connect_timeout,
                application_name=f"orchestrator pid {os.getpid()}",
            )
        except psycopg.Error as failed:
            raise StoreUnavailable(f"cannot connect to {self.where}: {one_line(failed)}") from failed

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        """The connection, made again (with the session locks taken again) if it broke. Under ``_lock``."""
        db = self._db
        if not (db.broken or db.closed) or self._closed:
            return db
        db = self._db = self._connect()
        for lock in self._advisory:
            row = db.execute("SELECT pg_try_advisory_lock(%s)", (lock._key,)).fetchone()
            if not (row and row[0]):
                self._lost.add(lock.session_id)
        return db

    @contextmanager
    def _transaction(
        self, session_id: str | None = None, *, operation: str = "other"
    ) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """One transaction on the connection, its errors as StoreError, its duration measured as ``operation``."""
        with measured("postgresql", operation, "sessions"), self._lock:
            try:
                db = self._connection()
            except psycopg.Error as failed:
                raise StoreUnavailable(f"{self.where}: {one_line(failed)}") from failed
            if session_id is not None and session_id in self._lost:
                raise SessionLost(session_id, self.where)
            try:
                with db.transaction():
                    yield db
            except psycopg.errors.UniqueViolation as clash:
                raise StoreError(f"session {session_id!r}: {clash} (is another writer running it?)") from clash
            except psycopg.Error as failed:
                if db.broken or db.closed:
                    raise StoreUnavailable(f"{self.where}: the connection was lost: {one_line(failed)}") from failed
                raise StoreError(f"{self.where}: {failed}") from failed

    def _migrate(self) -> None:
        with self._transaction(operation="migrate") as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            db.execute("CREATE TABLE IF NOT EXISTS orchestrator_schema_version (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM orchestrator_schema_version").fetchone()
            version = int(row[0]) if row is not None else 0
            if row is None:
                db.execute("INSERT INTO orchestrator_schema_version (version) VALUES (0)")
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(self.where, version, SCHEMA_VERSION)
            for statements in _MIGRATIONS[version:]:
                for statement in statements:
                    db.execute(statement)
            db.execute("UPDATE orchestrator_schema_version SET version = %s", (SCHEMA_VERSION,))

    def schema_version(self) -> int:
        with self._transaction(operation="schema_version") as db:
            row = db.execute("SELECT version FROM orchestrator_schema_version").fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self._local.release_all()
        with self._lock:
            self._closed = True
            held = bool(self._advisory)
            self._advisory.clear()
            if held and not (self._db.closed or self._db.broken):
                # The server would drop them with the connection, but only once its backend process
                # has noticed the close: release them now, so the next owner's lock succeeds at once.
                with contextlib.suppress(psycopg.Error):
                    self._db.execute("SELECT pg_advisory_unlock_all()")
            self._db.close()

    # sessions and messages --------------------------------------------------

    def sessions(self) -> list[str]:
        with self._transaction(operation="sessions") as db:
            rows = db.execute(
                "SELECT session_id FROM orchestrator_messages GROUP BY session_id ORDER BY MIN(created), session_id"
            ).fetchall()
        return [str(session_id) for (session_id,) in rows]

    def rows(self, session_id: str) -> list[StoredRow]:
        with self._transaction(session_id, operation="rows") as db:
            rows = db.execute(
                "SELECT row_id, position, role, body FROM orchestrator_messages WHERE session_id = %s "
                "ORDER BY position",
                (session_id,),
            ).fetchall()
        return [StoredRow(int(r), int(p), str(role), str(body)) for r, p, role, body in rows]

    def quarantined(self, session_id: str | None = None) -> list[Quarantined]:
        query = "SELECT row_id, session_id, position, body, reason FROM orchestrator_unreadable_rows"
        params: tuple[str, ...] = ()
        if session_id is not None:
            query, params = query + " WHERE session_id = %s", (session_id,)
        with self._transaction(session_id, operation="quarantined") as db:
            rows = db.execute(query + " ORDER BY seq", params).fetchall()
        return [Quarantined(int(r), str(s), int(p), str(b), str(why)) for r, s, p, b, why in rows]

    def idle_sessions(self, idle_before: float) -> list[str]:
        with self._transaction(operation="idle_sessions") as db:
            query = IDLE_SESSIONS.format(prefix="orchestrator_").replace("?", "%s")
            rows = db.execute(query, (idle_before,)).fetchall()
        return [str(session_id) for (session_id,) in rows]

    def delete_session(self, session_id: str) -> bool:
        found = 0
        tables = ("messages", "pending_approvals", "session_modes", "unreadable_rows")
        with self._transaction(session_id, operation="delete_session") as db, db.cursor() as cursor:
            for table in tables:
                cursor.execute(f"DELETE FROM orchestrator_{table} WHERE session_id = %s", (session_id,))
                found += cursor.rowcount
        return found > 0

    def apply(self, session_id: str, change: SessionChange) -> None:
        now = time.time()
        rows = change_rows(session_id, change, now)
        with self._transaction(session_id, operation="apply") as db, db.cursor() as cursor:
            for unreadable, body in rows.quarantine:
                cursor.execute(
                    "INSERT INTO orchestrator_unreadable_rows (row_id, session_id, position, body, reason, found) "
                    "SELECT row_id, session_id, position, body, %s, %s FROM orchestrator_messages "
                    "WHERE row_id = %s AND session_id = %s",
                    (unreadable.reason, now, unreadable.row_id, session_id),
                )
                cursor.execute(
                    "UPDATE orchestrator_messages SET body = %s WHERE row_id = %s AND session_id = %s",
                    (body, unreadable.row_id, session_id),
                )
            if rows.replace is not None:
                cursor.execute("DELETE FROM orchestrator_messages WHERE session_id = %s", (session_id,))
                if rows.replace:
                    cursor.executemany(_INSERT, rows.replace)
            if rows.append:
                cursor.executemany(_INSERT, rows.append)
            if rows.ended:
                cursor.execute(
                    "DELETE FROM orchestrator_pending_approvals WHERE session_id = %s AND tool_call_id = ANY(%s)",
                    (session_id, sorted(rows.ended)),
                )
            if change.plan_mode == "normal":
                cursor.execute("DELETE FROM orchestrator_session_modes WHERE session_id = %s", (session_id,))
            elif change.plan_mode is not None:
                cursor.execute(
                    "INSERT INTO orchestrator_session_modes (session_id, plan_mode, updated) VALUES (%s, %s, %s) "
                    "ON CONFLICT (session_id) DO UPDATE SET plan_mode = excluded.plan_mode, updated = excluded.updated",
                    (session_id, change.plan_mode, now),
                )

    # approvals --------------------------------------------------------------

    def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        query = (
            "SELECT session_id, request_id, tool_call_id, event, response_event, payload, response, created,"
            " fingerprint FROM orchestrator_pending_approvals"
        )
        params: tuple[str, ...] = ()
        if session_id is not None:
            query, params = query + " WHERE session_id = %s", (session_id,)
        with self._transaction(session_id, operation="pending_approvals") as db:
            rows = db.execute(query + " ORDER BY created, seq", params).fetchall()
        return [
            PendingApproval(
                sid,
                rid,
                call_id,
                event,
                response_event,
                json_object(payload) or {},
                json_object(response),
                created,
                fingerprint,
            )
            for sid, rid, call_id, event, response_event, payload, response, created, fingerprint in rows
        ]

    def record_wait(self, wait: PendingApproval) -> None:
        body = clean_text(json.dumps(dict(wait.payload), default=json_default, ensure_ascii=False))
        with self._transaction(wait.session_id, operation="record_wait") as db:
            db.execute(
                "INSERT INTO orchestrator_pending_approvals "
                "(session_id, tool_call_id, request_id, event, response_event, payload, created, fingerprint) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (session_id, tool_call_id) DO UPDATE SET request_id = excluded.request_id, "
                "event = excluded.event, response_event = excluded.response_event, payload = excluded.payload, "
                "fingerprint = excluded.fingerprint, response = NULL",
                (
                    wait.session_id,
                    wait.tool_call_id,
                    wait.request_id,
                    wait.event,
                    wait.response_event,
                    body,
                    wait.created,
                    wait.fingerprint,
                ),
            )

    def record_response(
        self, session_id: str, tool_call_id: str, response_event: str, response: Mapping[str, Any]
    ) -> bool:
        body = clean_text(json.dumps(dict(response), default=json_default, ensure_ascii=False))
        with self._transaction(session_id, operation="record_response") as db:
            changed = db.execute(
                "UPDATE orchestrator_pending_approvals SET response = %s WHERE session_id = %s "
                "AND tool_call_id = %s AND response_event = %s AND response IS NULL",
                (body, session_id, tool_call_id, response_event),
            ).rowcount
        return changed > 0

    def forget_request(self, session_id: str, request_id: str) -> None:
        with self._transaction(session_id, operation="forget_request") as db:
            db.execute(
                "DELETE FROM orchestrator_pending_approvals WHERE session_id = %s AND request_id = %s "
                "AND response IS NULL",
                (session_id, request_id),
            )

    # modes and ownership ----------------------------------------------------

    def plan_mode(self, session_id: str) -> str:
        with self._transaction(session_id, operation="plan_mode") as db:
            row = db.execute(
                "SELECT plan_mode FROM orchestrator_session_modes WHERE session_id = %s", (session_id,)
            ).fetchone()
        return str(row[0]) if row else "normal"

    def lock_session(self, session_id: str) -> SessionLock:
        local = self._local.acquire(session_id)  # two runners in this process share one connection
        key = _lock_key(session_id)
        try:
            with self._transaction(session_id, operation="lock_session") as db:
                row = db.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                holder = None if row and row[0] else self._holder(db, key)
        except BaseException:
            local.release()
            raise
        if row is None or not row[0]:
            local.release()
            raise SessionLocked(session_id, self.where, holder)
        lock = _AdvisoryLock(self, session_id, key, local)
        with self._lock:
            self._advisory.add(lock)
        return lock

    @staticmethod
    def _holder(db: psycopg.Connection[tuple[Any, ...]], key: int) -> str | None:
        unsigned = key & 0xFFFFFFFFFFFFFFFF
        row = db.execute(
            "SELECT a.application_name, a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid::bigint = %s AND l.objid::bigint = %s",
            (unsigned >> 32, unsigned & 0xFFFFFFFF),
        ).fetchone()
        if row is None:
            return None
        return f"{row[0] or 'a client'} (server pid {row[1]})"

    def _unlock(self, released: _AdvisoryLock) -> None:
        with self._lock:
            self._advisory.discard(released)
            if released.session_id in self._lost:
                self._lost.discard(released.session_id)
                return  # another process holds it: nothing of ours to release
            if self._db.closed or self._db.broken:
                return  # the server dropped it with the connection
            try:
                self._db.execute("SELECT pg_advisory_unlock(%s)", (released._key,))
            except psycopg.Error as failed:
                raise StoreError(f"{self.where}: {failed}") from failed

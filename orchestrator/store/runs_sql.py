"""``SQLRunStore``: the run store in SQLite or PostgreSQL, one implementation over both.

The statements are the same in both dialects (``ON CONFLICT``, ``RETURNING``,
partial unique indexes); what differs is the placeholder, how a claim locks
(PostgreSQL: ``FOR UPDATE SKIP LOCKED``; SQLite: one writer at a time through
``BEGIN IMMEDIATE``), the column types, and the wake-up hint (PostgreSQL's
``LISTEN``/``NOTIFY``; SQLite polls). History goes into the session store's
own message table, so one database holds a deployment.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, cast

import attrs

from machines.build import BoundMachine, GuardRefused, IllegalTransition
from machines.run_lease import RUN_LEASE
from orchestrator.errors import SessionBusy
from orchestrator.messages import Message
from orchestrator.store.change_notes import change_payloads, changed_keys
from orchestrator.store.changes import INBOX, RUN, WORK, ChangeFeed
from orchestrator.store.codec import UndecodableMessage, decode_message, encode_message, placeholder
from orchestrator.store.errors import (
    SchemaTooNew,
    SchemaUnrecognised,
    SessionOwned,
    StoreError,
    StoreUnavailable,
    one_line,
)
from orchestrator.store.fork import ForkRefused, first_turns
from orchestrator.store.interface import SessionLock
from orchestrator.store.locks import FileLocks
from orchestrator.store.metrics import claimed, measured
from orchestrator.store.runs import (
    ACTIVE,
    FINAL,
    LOCAL_PRINCIPAL,
    AnswerWaiting,
    Claim,
    Claimed,
    InboxItem,
    InboxKeyReused,
    InboxRefused,
    Lease,
    LeaseLost,
    NewInboxItem,
    PrunedRun,
    RunCommit,
    RunRecord,
    RunStore,
    StoredEvent,
    UnknownRunRow,
)
from orchestrator.store.sqlite import open_sqlite, refuse_newer_sessions
from orchestrator.store.titles import first_input_title, forked_title
from orchestrator.text import clean_text

__all__ = ["RUN_SCHEMA_VERSION", "SQLRunStore", "postgres_run_store", "sqlite_run_store"]

WAKE_CHANNEL = "orchestrator_work"
"""Sent once by each transaction after which a run may be claimed (no payload)."""
CHANGE_CHANNEL = "orchestrator_changes"
"""Carries every run a transaction changed, in one notification (``orchestrator.store.change_notes``): the runs whose
events or status moved (``run``), and those whose inbox got an item (``inbox``)."""
PER_RUN_CHANNEL = "orchestrator_runs"
"""Earlier versions send one notification per run changed here (``run:REQUEST_ID``, ``inbox:REQUEST_ID``); it is
listened to, so that the feeds hear their writers in a cluster of both versions, but no longer sent on."""
LISTEN_SECONDS = 0.5
"""How often the listening thread looks whether the store was closed or no feed is left."""
POOL_SIZE = 16
"""Most PostgreSQL connections a store opens for its calls (made as calls need them, kept while idle)."""
_IN_LIST = 500
"""Most ids one ``IN (...)`` list of a statement holds (a longer list is read in parts)."""
DATA_VERSION_SECONDS = 0.25
"""How often a watched SQLite store asks whether another process wrote to its file (``PRAGMA data_version``)."""
log = logging.getLogger("orchestrator.store")
_ACTIVE_SQL = "('queued', 'running', 'parked')"
_FINAL_SQL = "('completed', 'failed', 'cancelled')"
_RUN_COLUMNS = (
    "request_id, session_id, status, input, checkpoint, version, last_seq, lease_owner, lease_expires,"
    " cancel_requested, created, updated, trace_context, settings, fingerprint"
)


class _Cursor(Protocol):
    changed: set[tuple[str, str]]
    notified: set[tuple[str, str]]

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...
    def pipeline(self) -> AbstractContextManager[Any]: ...
    def nested(self) -> AbstractContextManager[Any]: ...
    def query(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


@attrs.frozen
class Dialect:
    name: str
    ddl: tuple[str, ...]
    messages_table: str
    lock_rows: str
    placeholder: str
    real: str
    columns_of: str  # the column names of the table given as the one parameter
    now: str  # the database's clock, in seconds since the epoch (leases are judged on it, never a carrier's)

    def sql(self, statement: str) -> str:
        return statement if self.placeholder == "?" else statement.replace("?", self.placeholder)


def _ddl(real: str, serial: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE IF NOT EXISTS orchestrator_runs (
            request_id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            status TEXT NOT NULL,
            input TEXT NOT NULL,
            checkpoint TEXT,
            version BIGINT NOT NULL DEFAULT 0,
            last_seq BIGINT NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_token TEXT,
            lease_expires {real},
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            created {real} NOT NULL,
            updated {real} NOT NULL,
            not_before {real},
            wake_at {real},
            trace_context TEXT,
            settings TEXT,
            fingerprint TEXT,
            owner TEXT
        )""",
        f"CREATE UNIQUE INDEX IF NOT EXISTS orchestrator_one_active_run ON orchestrator_runs (session_id)"
        f" WHERE status IN {_ACTIVE_SQL}",
        "CREATE INDEX IF NOT EXISTS orchestrator_runs_status ON orchestrator_runs (status, updated)",
        "CREATE INDEX IF NOT EXISTS orchestrator_runs_wake ON orchestrator_runs (status, wake_at)",
        f"""CREATE TABLE IF NOT EXISTS orchestrator_run_events (
            request_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            type TEXT NOT NULL,
            body TEXT NOT NULL,
            created {real} NOT NULL,
            PRIMARY KEY (request_id, seq)
        )""",
        _inbox_table("orchestrator_inbox", real, serial),
        "CREATE INDEX IF NOT EXISTS orchestrator_inbox_run ON orchestrator_inbox (request_id, consumed, id)",
        "CREATE UNIQUE INDEX IF NOT EXISTS orchestrator_inbox_key ON orchestrator_inbox (session_id, idempotency_key)",
        # Pruned runs' ids (never their sessions'), so following one answers 410 instead of 404.
        f"""CREATE TABLE IF NOT EXISTS orchestrator_pruned_runs (
            request_id TEXT PRIMARY KEY,
            reason TEXT NOT NULL,
            pruned {real} NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS orchestrator_pruned_runs_age ON orchestrator_pruned_runs (pruned)",
        # The owners of forks, until a run of theirs records one (a session's runs carry its owner).
        """CREATE TABLE IF NOT EXISTS orchestrator_session_owners (
            session_id TEXT PRIMARY KEY,
            owner TEXT NOT NULL
        )""",
        # The titles set for sessions (a session without one is titled by its first input).
        """CREATE TABLE IF NOT EXISTS orchestrator_session_titles (
            session_id TEXT PRIMARY KEY,
            title TEXT NOT NULL
        )""",
    )


def _inbox_table(name: str, real: str, serial: str) -> str:
    """The inbox table (schema version 2: an idempotency key is unique per session, with its body's digest)."""
    return f"""CREATE TABLE IF NOT EXISTS {name} (
            id {serial},
            session_id TEXT NOT NULL,
            request_id TEXT NOT NULL,
            name TEXT NOT NULL,
            payload TEXT NOT NULL,
            idempotency_key TEXT,
            consumed INTEGER NOT NULL DEFAULT 0,
            created {real} NOT NULL,
            body_digest TEXT
        )"""


SQLITE = Dialect(
    "sqlite",
    _ddl("REAL", "INTEGER PRIMARY KEY AUTOINCREMENT"),
    messages_table="messages",
    lock_rows="",
    placeholder="?",
    real="REAL",
    columns_of="SELECT name FROM pragma_table_info(?)",
    now="((julianday('now') - 2440587.5) * 86400.0)",
)
POSTGRES = Dialect(
    "postgresql",
    _ddl("DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY"),
    messages_table="orchestrator_messages",
    lock_rows=" FOR UPDATE SKIP LOCKED",
    placeholder="%s",
    real="DOUBLE PRECISION",
    columns_of="SELECT column_name FROM information_schema.columns"
    " WHERE table_schema = current_schema() AND table_name = ?",
    # A scalar subquery: evaluated once per statement, so the claim's comparisons with it are index bounds
    # (a bare clock_timestamp() is volatile, and every parked row would be read to compare it).
    now="(SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION))",
)

# schema versions -------------------------------------------------------------

RUN_SCHEMA_VERSION = 3
"""The version of the run store's tables this library writes; ``orchestrator_run_schema`` holds a database's own.

Version 0 is a run store from before the version was recorded (no such table): its tables may
lack columns added since, which opening it adds with their defaults. Version 2 adds a run's
``not_before`` (a give-back's back-off) and makes an inbox idempotency key unique per session
instead of across the database, with the digest of the body it was first used with. Version 3
adds a run's ``wake_at`` (the earliest expiry of a parked run's waits), indexed with its status,
its ``trace_context`` (the W3C trace context its segments are traced under) and ``settings`` (its
own model settings and output type), and its ``fingerprint`` (of the agent that carries
it, see ``orchestrator.runtime.fingerprint``) and ``owner`` (the principal it was started for), all
nullable.
"""
_SCHEMA_TABLE = "orchestrator_run_schema"
_SCHEMA_LOCK = int.from_bytes(b"orchruns", "big") & 0x7FFFFFFFFFFFFFFF
_COLUMNS = {
    "orchestrator_runs": (
        "request_id",
        "session_id",
        "status",
        "input",
        "checkpoint",
        "version",
        "last_seq",
        "lease_owner",
        "lease_token",
        "lease_expires",
        "cancel_requested",
        "created",
        "updated",
    ),
    "orchestrator_run_events": ("request_id", "seq", "type", "body", "created"),
    "orchestrator_inbox": (
        "id",
        "session_id",
        "request_id",
        "name",
        "payload",
        "idempotency_key",
        "consumed",
        "created",
    ),
}
"""Every column of each table of version 1."""


def _late_columns(real: str) -> dict[str, dict[str, str]]:
    """The columns a version-0 table may lack, with the definitions (defaults included) that add them."""
    return {
        "orchestrator_runs": {
            "version": "BIGINT NOT NULL DEFAULT 0",
            "last_seq": "BIGINT NOT NULL DEFAULT 0",
            "lease_owner": "TEXT",
            "lease_token": "TEXT",
            "lease_expires": real,
            "cancel_requested": "INTEGER NOT NULL DEFAULT 0",
        },
        "orchestrator_inbox": {"consumed": "INTEGER NOT NULL DEFAULT 0"},
    }


def _from_unversioned(dialect: Dialect, db: _Cursor, where: str) -> None:
    """Version 0 to 1: add the columns an existing table lacks; a table that lacks any other is refused."""
    late = _late_columns(dialect.real)
    for table, columns in _COLUMNS.items():
        db.execute(dialect.columns_of, (table,))
        present = {str(row[0]).lower() for row in db.fetchall()}
        if not present:
            continue  # made by the DDL
        missing = [column for column in columns if column not in present]
        unknown = [column for column in missing if column not in late.get(table, {})]
        if unknown:
            raise SchemaUnrecognised(
                where,
                f"table {table} has no column {', '.join(unknown)} (its columns: {', '.join(sorted(present))})",
                "the run store's tables of schema version 1 or an earlier one",
            )
        for column in missing:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {late[table][column]}")


def _to_version_2(dialect: Dialect, db: _Cursor, where: str) -> None:
    """Version 1 to 2: runs get ``not_before``; the inbox's key becomes unique per session, with a body digest.

    SQLite cannot drop a column's UNIQUE constraint, so its inbox is copied into a table of the new shape.
    """
    db.execute(dialect.columns_of, ("orchestrator_runs",))
    if {str(row[0]).lower() for row in db.fetchall()}:
        db.execute(f"ALTER TABLE orchestrator_runs ADD COLUMN not_before {dialect.real}")
    db.execute(dialect.columns_of, ("orchestrator_inbox",))
    if not {str(row[0]).lower() for row in db.fetchall()}:
        return  # made by the DDL
    if dialect.name == "sqlite":
        db.execute(_inbox_table("orchestrator_inbox_v2", dialect.real, "INTEGER PRIMARY KEY AUTOINCREMENT"))
        db.execute(
            "INSERT INTO orchestrator_inbox_v2 (id, session_id, request_id, name, payload, idempotency_key, consumed,"
            " created) SELECT id, session_id, request_id, name, payload, idempotency_key, consumed, created"
            " FROM orchestrator_inbox"
        )
        db.execute("DROP TABLE orchestrator_inbox")
        db.execute("ALTER TABLE orchestrator_inbox_v2 RENAME TO orchestrator_inbox")
    else:
        db.execute("ALTER TABLE orchestrator_inbox ADD COLUMN body_digest TEXT")
        db.execute("ALTER TABLE orchestrator_inbox DROP CONSTRAINT IF EXISTS orchestrator_inbox_idempotency_key_key")


def _to_version_3(dialect: Dialect, db: _Cursor, where: str) -> None:
    """Version 2 to 3: runs get ``wake_at`` (its index is made by the DDL), ``trace_context``, ``settings``,
    ``fingerprint`` and ``owner`` (nullable: a run from before has none)."""
    db.execute(dialect.columns_of, ("orchestrator_runs",))
    if {str(row[0]).lower() for row in db.fetchall()}:
        db.execute(f"ALTER TABLE orchestrator_runs ADD COLUMN wake_at {dialect.real}")
        db.execute("ALTER TABLE orchestrator_runs ADD COLUMN trace_context TEXT")
        db.execute("ALTER TABLE orchestrator_runs ADD COLUMN settings TEXT")
        db.execute("ALTER TABLE orchestrator_runs ADD COLUMN fingerprint TEXT")
        db.execute("ALTER TABLE orchestrator_runs ADD COLUMN owner TEXT")


_UPGRADES: tuple[Callable[[Dialect, _Cursor, str], None], ...] = (_from_unversioned, _to_version_2, _to_version_3)
"""``_UPGRADES[n]`` migrates version n to n + 1; a new version appends its upgrade."""
assert len(_UPGRADES) == RUN_SCHEMA_VERSION


_COMMIT_TRIGGERS = {
    "running": "checkpoint",
    "parked": "park",
    "queued": "release",
    "completed": "complete",
    "failed": "fail",
    "cancelled": "cancel",
}


def lease_step(status: str, trigger: str, *, held: bool = False, expired: bool = False, due: bool = False) -> str:
    """The status a run moves to when ``trigger`` is taken on the run lease machine; StoreError when refused."""
    guards = {"lease_held": lambda _: held, "lease_expired": lambda _: expired, "wake_due": lambda _: due}
    machine = BoundMachine(RUN_LEASE, guards, initial={"status": status})
    try:
        machine.fire(trigger)
        return machine.state()
    except (IllegalTransition, GuardRefused) as refused:
        raise StoreError(f"run status {status!r}: {refused}") from None
    finally:
        machine.unbind()


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""One encoder for every row: ``json.dumps`` with options builds a new one per call."""


def _dumps(value: Any) -> str:
    return clean_text(_ENCODER.encode(value))


def _json_object(text: str, what: str, problems: list[str]) -> dict[str, Any] | None:
    """The JSON object ``text`` holds; None, with the reason added to ``problems``, when it holds none."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as error:
        problems.append(f"its {what} is not JSON ({error})")
        return None
    if not isinstance(value, dict):
        problems.append(f"its {what} is {type(value).__name__}, not an object")
        return None
    return value


def _record(row: Sequence[Any]) -> RunRecord:
    """The run a row holds; an input or checkpoint that does not decode is noted in ``unreadable``, not raised."""
    problems: list[str] = []
    input_message = _json_object(row[3], "input", problems)
    checkpoint = _json_object(row[4], "checkpoint", problems) if row[4] is not None else None
    # A trace context that does not decode only leaves the run untraced: it is no reason to fail it.
    trace_context = _json_object(row[12], "trace context", []) if row[12] is not None else None
    settings = _json_object(row[13], "settings", problems) if row[13] is not None else None
    return RunRecord(
        request_id=row[0],
        session_id=row[1],
        status=row[2],
        input=input_message or {},
        checkpoint=checkpoint,
        version=int(row[5]),
        last_seq=int(row[6]),
        lease_owner=row[7],
        lease_expires=row[8],
        cancel_requested=bool(row[9]),
        created=row[10],
        updated=row[11],
        trace_context={str(k): str(v) for k, v in trace_context.items()} if trace_context else None,
        settings=settings,
        unreadable="; ".join(problems) or None,
        fingerprint=row[14],
    )


def _stored_message(position: Any, body: Any) -> Message:
    """The message a history row holds; a placeholder saying why when it does not decode."""
    try:
        return decode_message(body)
    except UndecodableMessage as problem:
        return placeholder(int(position), str(problem))


def _body_digest(item: NewInboxItem) -> str:
    """What an idempotency key is held to: the digest of the item's name and payload."""
    body = _dumps({"name": item.name, "payload": dict(item.payload)})
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _inbox_item(row: Sequence[Any]) -> InboxItem:
    return InboxItem(
        id=int(row[0]),
        session_id=row[1],
        request_id=row[2],
        name=row[3],
        payload=json.loads(row[4]),
        idempotency_key=row[5],
        created=row[6],
    )


_LOCAL_FEEDS: dict[str, weakref.WeakSet[ChangeFeed]] = {}
"""The feeds of every SQLite store of this process, by the real path of its file: told at once of a commit."""
_LOCAL_LOCK = threading.Lock()


class SQLRunStore(RunStore):
    """The run store; every method one transaction.

    SQLite: one connection guarded by a lock. PostgreSQL: a pool of up to ``pool_size``
    connections, so calls from many threads run at once. A PostgreSQL connection that broke
    (the server restarted, a proxy dropped it) fails the call it broke in with StoreUnavailable,
    and the idle ones are dropped with it; the next call connects again (and fails with
    StoreUnavailable while the server cannot be reached).

    Every transaction that appends events, changes a run's status or posts to an inbox tells
    the store's feeds (``watch``) after it commits: on PostgreSQL by one ``NOTIFY`` on
    ``CHANGE_CHANNEL`` naming every run it changed (and one on ``WAKE_CHANNEL`` when a run may
    be claimed), which the process's one listener thread hands to its feeds; on SQLite directly
    to the feeds of this process, and to those of other processes through ``PRAGMA data_version``,
    read every ``DATA_VERSION_SECONDS`` while a feed is open.
    """

    def __init__(
        self,
        dialect: Dialect,
        connect: Callable[[], Any],
        where: str,
        *,
        listen: Callable[[], Any] | None = None,
        pool_size: int = POOL_SIZE,
    ) -> None:
        self.dialect = dialect
        self.where = where
        self._connect = connect
        self._lock = threading.RLock()
        self._idle: list[Any] = []  # PostgreSQL connections not in a call
        self._slots = threading.BoundedSemaphore(max(1, pool_size))
        self._listen = listen
        self._listener: Any = None
        self._feeds: weakref.WeakSet[ChangeFeed] = weakref.WeakSet()
        self._watching: threading.Thread | None = None
        self._closed = threading.Event()
        self._local_key = os.path.realpath(where) if dialect.name == "sqlite" else ""
        in_memory = where == ":memory:" or where.startswith("file:")
        # On an SQLite file, the session store's lock files: a session runs in one carrier or one chat at a time.
        self._session_locks = FileLocks(where + ".locks", where) if dialect.name == "sqlite" and not in_memory else None
        try:
            self._db = connect()
        except StoreError:
            raise
        except Exception as failed:
            raise StoreUnavailable(f"cannot connect to {where}: {one_line(failed)}") from failed
        try:
            with self._transaction("open") as db:
                self._open_schema(db)
        except BaseException:
            with contextlib.suppress(Exception):
                self._db.close()
            raise

    def _open_schema(self, db: _Cursor) -> None:
        """Use the tables as they are (current version), migrate them (an older one), or refuse them.

        One transaction; on PostgreSQL under an advisory lock, so processes starting together migrate once.
        A newer version is SchemaTooNew, a version table or tables this library cannot read SchemaUnrecognised.
        """
        where = f"the run store in {self.where}"
        if self.dialect.name == "postgresql":
            db.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
        db.execute(f"CREATE TABLE IF NOT EXISTS {_SCHEMA_TABLE} (version INTEGER NOT NULL)")
        db.execute(f"SELECT version FROM {_SCHEMA_TABLE}")
        rows = db.fetchall()
        if len(rows) > 1 or (rows and not (isinstance(rows[0][0], int) and rows[0][0] >= 0)):
            found = ", ".join(repr(row[0]) for row in rows)
            raise SchemaUnrecognised(where, f"table {_SCHEMA_TABLE} holds {found}", "one schema version number")
        version = int(rows[0][0]) if rows else 0
        if version > RUN_SCHEMA_VERSION:
            raise SchemaTooNew(where, version, RUN_SCHEMA_VERSION)
        for upgrade in _UPGRADES[version:]:
            upgrade(self.dialect, db, where)
        for statement in self.dialect.ddl:
            db.execute(statement)
        if version != RUN_SCHEMA_VERSION:
            db.execute(f"DELETE FROM {_SCHEMA_TABLE}")
            db.execute(f"INSERT INTO {_SCHEMA_TABLE} (version) VALUES (?)", (RUN_SCHEMA_VERSION,))

    def schema_version(self) -> int:
        """The version the database's run store tables are at (RUN_SCHEMA_VERSION once opened)."""
        with self._transaction("schema_version") as db:
            db.execute(f"SELECT version FROM {_SCHEMA_TABLE}")
            return int(db.fetchone()[0])

    # plumbing ---------------------------------------------------------------

    def _checkout(self) -> Any:
        """A PostgreSQL connection of the pool (the first one made at start, then idle ones, then new ones)."""
        with self._lock:
            db, self._db = self._db, None
            if db is None and self._idle:
                db = self._idle.pop()
        if db is not None and not (db.broken or db.closed):
            return db
        try:
            return self._connect()
        except Exception as failed:
            raise StoreUnavailable(f"cannot connect to {self.where}: {one_line(failed)}") from failed

    def _checkin(self, db: Any) -> None:
        if db.broken or db.closed or self._closed.is_set():
            with contextlib.suppress(Exception):
                db.close()
            return
        with self._lock:
            self._idle.append(db)

    def _drop_idle(self) -> None:
        """Close the idle connections: one broke, so the server (or the way to it) probably went away."""
        with self._lock:
            idle, self._idle = self._idle, []
        for db in idle:
            with contextlib.suppress(Exception):
                db.close()

    @contextmanager
    def _transaction(self, operation: str = "other") -> Iterator[_Cursor]:
        """One transaction, its duration measured as ``operation`` (see ``orchestrator.store.metrics``)."""
        with measured(self.dialect.name, operation), self._transaction_unmeasured() as db:
            yield db

    @contextmanager
    def _transaction_unmeasured(self) -> Iterator[_Cursor]:
        if self.dialect.name == "sqlite":
            with self._lock:
                cursor = self._db.cursor()
                cursor.execute("BEGIN IMMEDIATE")
                dialected = _Dialected(cursor, self.dialect)
                try:
                    yield dialected
                except BaseException:
                    cursor.execute("ROLLBACK")
                    raise
                cursor.execute("COMMIT")
            if dialected.changed:
                self._tell_local(frozenset(dialected.changed))
            return
        with self._slots:
            db = self._checkout()
            try:
                with db.transaction(), db.cursor() as cursor:
                    dialected = _Dialected(cursor, self.dialect)
                    yield dialected
                    self._notify_changes(dialected)
            except Exception as error:
                if db.broken or db.closed:
                    self._drop_idle()
                    raise StoreUnavailable(f"{self.where}: the connection was lost: {one_line(error)}") from error
                raise
            finally:
                self._checkin(db)

    @staticmethod
    def _notify(db: _Cursor) -> None:
        """A run may be claimed: wake the workers (on PostgreSQL once per transaction, at its end)."""
        db.changed.add((WORK, ""))

    @staticmethod
    def _changed(db: _Cursor, topic: str, request_id: str) -> None:
        db.changed.add((topic, request_id))

    def _notify_changes(self, db: _Cursor) -> None:
        """PostgreSQL: send the notifications of the changes made so far and not yet sent, in one statement (each
        delivered at commit; NOTIFY locks at commit, so never per event): one naming every run changed (more when
        they do not fit in one payload) and, when a run may be claimed, one on ``WAKE_CHANNEL``. Called at the end
        of every transaction, and earlier by a block that sends it in a pipeline with its own statements."""
        if self.dialect.name != "postgresql":
            return
        pending = db.changed - db.notified
        if not pending:
            return
        db.notified |= pending
        work = (WORK, "") in pending
        payloads = change_payloads(pending - {(WORK, "")})
        notices = ["pg_notify(?, ?)"] * len(payloads) + ([f"pg_notify('{WAKE_CHANNEL}', '')"] if work else [])
        params = [value for payload in payloads for value in (CHANGE_CHANNEL, payload)]
        db.execute(f"SELECT {', '.join(notices)}", params)

    # wake-ups ---------------------------------------------------------------

    def watch(self) -> ChangeFeed:
        """A feed of this store's changes; the store's one watching thread starts with the first."""
        feed = ChangeFeed()
        with self._lock:
            self._feeds.add(feed)
            if self.dialect.name == "sqlite":
                with _LOCAL_LOCK:
                    _LOCAL_FEEDS.setdefault(self._local_key, weakref.WeakSet()).add(feed)
            if self._watching is None and not self._closed.is_set():
                target = self._listen_loop if self.dialect.name == "postgresql" else self._data_version_loop
                self._watching = threading.Thread(target=target, name=f"watching {self.where}", daemon=True)
                self._watching.start()
        return feed

    def _tell(self, keys: frozenset[tuple[str, str]], *, everything: bool = False) -> None:
        with self._lock:
            feeds = list(self._feeds)
        for feed in feeds:
            feed.add(keys, everything=everything)

    def _tell_local(self, keys: frozenset[tuple[str, str]]) -> None:
        with _LOCAL_LOCK:
            feeds = list(_LOCAL_FEEDS.get(self._local_key, ()))
        for feed in feeds:
            feed.add(keys)

    def _data_version_loop(self) -> None:
        """SQLite: wake every feed when another process (or connection) committed to the file.

        The first reading wakes every feed too: a commit made between a feed's creation and that
        reading is in the baseline, so it would otherwise wake nobody (as a new listener does on PostgreSQL).
        """
        seen: Any = None
        while True:
            try:
                with self._lock:
                    version = self._db.execute("PRAGMA data_version").fetchone()[0]
            except Exception:  # closed meanwhile, or busy: asked again at the next turn
                version = seen
            if version is not None and version != seen:
                self._tell(frozenset(), everything=True)
                seen = version
            if self._closed.wait(DATA_VERSION_SECONDS) or not self._still_watched():
                return

    def _still_watched(self) -> bool:
        """Whether a feed of this store is still open; when none is, the watching thread is let go (the next
        ``watch`` starts another), so a store nobody watches any more keeps no thread reading it."""
        with self._lock:
            if any(not feed.closed for feed in self._feeds):
                return True
            self._watching = None
            return False

    def _listen_loop(self) -> None:
        """PostgreSQL: one listening connection; the notifications that arrive together wake the feeds of the runs
        they name (and of work) at once."""
        assert self._listen is not None
        listener: Any = None
        while not self._closed.is_set() and self._still_watched():
            try:
                if listener is None:
                    listener = self._listen()
                    for channel in (CHANGE_CHANNEL, WAKE_CHANNEL, PER_RUN_CHANNEL):
                        listener.execute(f"LISTEN {channel}")
                    self._tell(frozenset(), everything=True)  # anything may have changed while nobody listened
                deadline = time.monotonic() + LISTEN_SECONDS
                while (left := deadline - time.monotonic()) > 0:
                    keys, everything = _heard(listener.notifies(timeout=left, stop_after=1))
                    if keys or everything:
                        self._tell(frozenset(keys), everything=everything)
            except Exception as error:
                if self._closed.is_set():
                    break
                log.warning("%s: listening for changes: %s; listening again", self.where, one_line(error))
                if listener is not None:
                    with contextlib.suppress(Exception):
                        listener.close()
                listener = None
                self._tell(frozenset(), everything=True)
                self._closed.wait(0.5)
        if listener is not None:
            with contextlib.suppress(Exception):
                listener.close()

    def _row(self, db: _Cursor, request_id: str, *, lock: bool = False) -> RunRecord | None:
        suffix = " FOR UPDATE" if lock and self.dialect.name == "postgresql" else ""
        db.execute(f"SELECT {_RUN_COLUMNS} FROM orchestrator_runs WHERE request_id = ?{suffix}", (request_id,))
        row = db.fetchone()
        return _record(row) if row is not None else None

    # runs -------------------------------------------------------------------

    def create_run(
        self,
        session_id: str,
        request_id: str,
        input_message: Mapping[str, Any],
        *,
        trace_context: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
        owner: str | None = None,
    ) -> RunRecord:
        now = time.time()
        traced = _dumps(dict(trace_context)) if trace_context else None
        own = _dumps(dict(settings)) if settings else None
        try:
            with self._transaction("create_run") as db:
                db.execute(
                    f"SELECT request_id FROM orchestrator_runs WHERE session_id = ? AND status IN {_ACTIVE_SQL}",
                    (session_id,),
                )
                if db.fetchone() is not None:
                    raise SessionBusy(session_id)
                if self._row(db, request_id) is not None:
                    raise StoreError(f"a run {request_id!r} already exists")
                kept_for = None if owner is None else self._owners(db, [session_id]).get(session_id)
                if kept_for is not None and kept_for != owner:
                    raise SessionOwned(session_id, kept_for)
                db.execute("DELETE FROM orchestrator_pruned_runs WHERE request_id = ?", (request_id,))
                db.execute(
                    "INSERT INTO orchestrator_runs (request_id, session_id, status, input, version, last_seq,"
                    " cancel_requested, created, updated, trace_context, settings, owner)"
                    " VALUES (?, ?, 'queued', ?, 0, 0, 0, ?, ?, ?, ?, ?)",
                    (request_id, session_id, _dumps(dict(input_message)), now, now, traced, own, owner),
                )
                self._notify(db)
                created = self._row(db, request_id)
        except (sqlite3.IntegrityError, _pg_error("IntegrityError")) as clash:
            raise SessionBusy(session_id) from clash
        assert created is not None
        return created

    def run(self, request_id: str) -> RunRecord | None:
        with self._transaction("run") as db:
            return self._row(db, request_id)

    def owners(self, session_ids: Sequence[str]) -> dict[str, str]:
        with self._transaction() as db:
            return self._owners(db, session_ids)

    def _owners(self, db: _Cursor, session_ids: Sequence[str]) -> dict[str, str]:
        """Each known session's owner: its first run's (the runs of a session share one), else LOCAL_PRINCIPAL."""
        if not session_ids:
            return {}
        marks = ", ".join("?" for _ in session_ids)
        db.execute(
            f"SELECT session_id, owner FROM orchestrator_runs WHERE session_id IN ({marks})"
            " ORDER BY created, request_id",
            list(session_ids),
        )
        found: dict[str, str] = {}
        for session_id, owner in db.fetchall():
            found.setdefault(session_id, owner or LOCAL_PRINCIPAL)
        rest = [session_id for session_id in session_ids if session_id not in found]
        if rest:
            marks = ", ".join("?" for _ in rest)
            db.execute(f"SELECT session_id, owner FROM orchestrator_session_owners WHERE session_id IN ({marks})", rest)
            found.update((row[0], row[1]) for row in db.fetchall())
            rest = [session_id for session_id in rest if session_id not in found]
        if rest:
            marks = ", ".join("?" for _ in rest)
            table = self.dialect.messages_table
            db.execute(f"SELECT DISTINCT session_id FROM {table} WHERE session_id IN ({marks})", rest)
            found.update((row[0], LOCAL_PRINCIPAL) for row in db.fetchall())
        return found

    def runs(self, session_id: str | None = None, *, active: bool = False) -> list[RunRecord]:
        clauses, params = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if active:
            clauses.append(f"status IN {_ACTIVE_SQL}")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._transaction("runs") as db:
            db.execute(f"SELECT {_RUN_COLUMNS} FROM orchestrator_runs{where} ORDER BY created, request_id", params)
            return [_record(row) for row in db.fetchall()]

    # leases -----------------------------------------------------------------

    def claim(self, owner: str, lease_seconds: float, limit: int = 1) -> list[Lease]:
        """Expiry and back-off are judged on the database's clock, inside the statements (never this process's)."""
        with self._transaction("claim") as db:
            return [lease for lease, _ in self._claim(db, owner, lease_seconds, limit)[0]]

    def claim_runs(self, owner: str, lease_seconds: float, limit: int = 1, fresh: int | None = None) -> Claim:
        """One transaction: the claim, each claimed run's row, history and unconsumed inbox items, and ``next_wake``
        if it took fewer. The rows come back from the claim's one update; the inboxes and the histories of all the
        runs taken are each read by one statement."""
        with self._transaction("claim") as db:
            taken, fresh_left = self._claim(db, owner, lease_seconds, limit, fresh)
            inboxes: dict[str, list[InboxItem]] = {lease.request_id: [] for lease, _ in taken}
            histories: dict[str, list[Message]] = {lease.session_id: [] for lease, _ in taken}
            if taken:
                marks = ", ".join("?" for _ in taken)
                db.execute(
                    "SELECT id, session_id, request_id, name, payload, idempotency_key, created FROM orchestrator_inbox"
                    f" WHERE consumed = 0 AND request_id IN ({marks}) ORDER BY id",
                    list(inboxes),
                )
                for row in db.fetchall():
                    inboxes[row[2]].append(_inbox_item(row))
                histories = self._histories(db, list(histories))
            runs = tuple(
                Claimed(lease, record, tuple(histories[lease.session_id]), tuple(inboxes[lease.request_id]))
                for lease, record in taken
            )
            return Claim(runs, self._next_wake(db) if len(taken) < limit else None, fresh_left)

    def _claim(
        self, db: _Cursor, owner: str, lease_seconds: float, limit: int, fresh: int | None = None
    ) -> tuple[list[tuple[Lease, RunRecord]], bool]:
        """The leases taken, each with its run's row after the claim (runs that ran before first, then new ones, at
        most ``fresh`` of those), and whether a new run was left for the ``fresh`` bound alone. The runs chosen are
        leased by one update, which returns their rows."""
        now = time.time()
        clock = self.dialect.now
        fresh_left = False
        db.execute(
            "SELECT request_id, status, updated, not_before, lease_expires, wake_at, checkpoint IS NULL"
            " FROM orchestrator_runs"
            f" WHERE (status = 'queued' AND (not_before IS NULL OR not_before <= {clock}))"
            f" OR (status = 'running' AND lease_expires < {clock})"
            f" OR (status = 'parked' AND wake_at <= {clock})"
            " ORDER BY (checkpoint IS NULL), updated LIMIT ?" + self.dialect.lock_rows,
            (limit,),
        )
        chosen: dict[str, tuple[str, str]] = {}  # request id -> its new status and its lease's token, in claim order
        for request_id, status, updated, not_before, lease_expires, wake_at, never_ran in db.fetchall():
            if never_ran and fresh is not None:
                if fresh <= 0:
                    fresh_left = True
                    continue
                fresh -= 1
            trigger = {"queued": "claim", "parked": "expire"}.get(status, "take_over")
            # Claimable since it was queued (or its back-off ended), its wait expired, or its lease expired.
            if status == "queued":
                since = max(updated, not_before or 0.0)
            elif status == "parked":
                since = wake_at if wake_at is not None else updated
            else:
                since = lease_expires or updated
            claimed({"queued": "queued", "parked": "expire"}.get(status, "take_over"), now - float(since))
            chosen[request_id] = (lease_step(status, trigger, expired=True, due=True), secrets.token_hex(16))
        if not chosen:
            return [], fresh_left
        cases = " ".join("WHEN ? THEN ?" for _ in chosen)
        marks = ", ".join("?" for _ in chosen)
        params: list[Any] = [value for request_id, (status, _) in chosen.items() for value in (request_id, status)]
        params.append(owner)
        params.extend(value for request_id, (_, token) in chosen.items() for value in (request_id, token))
        params.extend((lease_seconds, now, *chosen))
        db.execute(
            f"UPDATE orchestrator_runs SET status = CASE request_id {cases} END, lease_owner = ?,"
            f" lease_token = CASE request_id {cases} END, lease_expires = {clock} + ?, not_before = NULL,"
            " wake_at = NULL, version = version + 1, updated = ?"
            f" WHERE request_id IN ({marks}) RETURNING {_RUN_COLUMNS}",
            params,
        )
        records = {record.request_id: record for record in map(_record, db.fetchall())}
        taken = []
        for request_id, (_, token) in chosen.items():
            record = records[request_id]
            assert record.lease_expires is not None  # set by the update
            lease = Lease(
                request_id,
                record.session_id,
                owner,
                token,
                record.version,
                float(record.lease_expires),
                record.last_seq,
                record.cancel_requested,
            )
            taken.append((lease, record))
        return taken, fresh_left

    def _lost(self, db: _Cursor, lease: Lease) -> LeaseLost:
        row = self._row(db, lease.request_id)
        if row is None:
            return LeaseLost(lease.request_id, "the run is gone")
        if row.status != "running":
            return LeaseLost(lease.request_id, f"the run is {row.status}")
        if row.lease_owner != lease.owner:
            return LeaseLost(lease.request_id, f"{row.lease_owner} holds it now")
        return LeaseLost(lease.request_id, f"version {row.version} is not {lease.version}")

    def next_wake(self) -> float | None:
        """One indexed read: ``MIN(wake_at)`` of the parked runs, less the database's clock."""
        with self._transaction("next_wake") as db:
            return self._next_wake(db)

    def _next_wake(self, db: _Cursor) -> float | None:
        db.execute(
            f"SELECT MIN(wake_at) - {self.dialect.now} FROM orchestrator_runs"
            " WHERE status = 'parked' AND wake_at IS NOT NULL"
        )
        row = db.fetchone()
        return float(row[0]) if row is not None and row[0] is not None else None

    def renew(self, lease: Lease, lease_seconds: float) -> Lease:
        with self._transaction("renew") as db:
            db.execute(
                f"UPDATE orchestrator_runs SET lease_expires = {self.dialect.now} + ? WHERE request_id = ?"
                " AND lease_token = ? AND status = 'running' RETURNING cancel_requested, lease_expires",
                (lease_seconds, lease.request_id, lease.token),
            )
            row = db.fetchone()
            if row is None:
                raise self._lost(db, lease)
        return attrs.evolve(lease, expires=float(row[1]), cancel_requested=bool(row[0]))

    def commit(self, lease: Lease, change: RunCommit) -> Lease:
        """The reads (the fence, the messages' next position, the inbox items consumed, an answer waiting for a
        run that parks) come first; the writes then go out together (on PostgreSQL one pipelined round trip)."""
        status = self._commit_status(change)
        with self._transaction("commit") as db:
            return self._commit(db, lease, change, status, time.time())

    def commit_many(self, commits: Sequence[tuple[Lease, RunCommit]]) -> list[Lease | Exception]:
        """One transaction for them all (one fsync, one round trip to the pool): one commit that fails (its fence, or
        a refusal) is undone alone and its exception returned in its place. Rows are locked in the order of their
        request ids, so two such transactions never deadlock.

        SQLite makes each commit in a savepoint of its own. PostgreSQL first makes them all without savepoints (each
        costs two statements); when one fails, that transaction is rolled back whole and they are made again, each
        in a savepoint of its own. The last commit sends the notification naming every run changed (the
        transaction's end sends it if that one failed)."""
        if len(commits) == 1:
            return super().commit_many(commits)
        order = sorted(range(len(commits)), key=lambda index: commits[index][0].request_id)
        now = time.time()
        if self.dialect.name == "postgresql":
            with contextlib.suppress(OneCommitFailed):
                return self._commit_all(commits, order, now)
        return self._commit_each(commits, order, now)

    def _commit_all(
        self, commits: Sequence[tuple[Lease, RunCommit]], order: list[int], now: float
    ) -> list[Lease | Exception]:
        """``commit_many`` in one transaction without savepoints; OneCommitFailed (the transaction rolled back) when a
        commit fails, since it may have written part of itself."""
        outcomes: list[Lease | Exception | None] = [None] * len(commits)
        with self._transaction("commit") as db:
            for index in order:
                lease, change = commits[index]
                try:
                    status = self._commit_status(change)
                    outcomes[index] = self._commit(db, lease, change, status, now, notify=index == order[-1])
                except (StoreError, sqlite3.Error, _pg_error()) as refused:
                    if isinstance(refused, StoreUnavailable):
                        raise
                    raise OneCommitFailed() from refused
        return [outcome for outcome in outcomes if outcome is not None]

    def _commit_each(
        self, commits: Sequence[tuple[Lease, RunCommit]], order: list[int], now: float
    ) -> list[Lease | Exception]:
        """``commit_many`` in one transaction, each commit in a savepoint of its own."""
        outcomes: list[Lease | Exception | None] = [None] * len(commits)
        with self._transaction("commit") as db:
            for index in order:
                lease, change = commits[index]
                changed, notified = set(db.changed), set(db.notified)
                try:
                    status = self._commit_status(change)
                    with self._savepoint(db):
                        outcomes[index] = self._commit(db, lease, change, status, now, notify=index == order[-1])
                except (StoreError, sqlite3.Error, _pg_error()) as refused:
                    if isinstance(refused, StoreUnavailable):
                        raise
                    db.changed, db.notified = changed, notified  # nothing of it was written
                    outcomes[index] = refused
        return [outcome for outcome in outcomes if outcome is not None]

    @contextmanager
    def _savepoint(self, db: _Cursor) -> Iterator[None]:
        """A savepoint inside the transaction: undone (alone) when the block raises."""
        if self.dialect.name == "postgresql":
            with db.nested():
                yield
            return
        db.execute("SAVEPOINT one_commit")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK TO one_commit")
            db.execute("RELEASE one_commit")
            raise
        db.execute("RELEASE one_commit")

    @staticmethod
    def _commit_status(change: RunCommit) -> str:
        trigger = _COMMIT_TRIGGERS.get(change.status)
        if trigger is None:
            raise StoreError(f"a commit cannot set the status {change.status!r}")
        return lease_step("running", trigger, held=True)

    def _commit(
        self, db: _Cursor, lease: Lease, change: RunCommit, status: str, now: float, *, notify: bool = True
    ) -> Lease:
        """``commit`` inside the transaction ``db``; with ``notify``, the changes of the transaction so far are
        notified in the same round trip as its writes."""
        lock = " FOR UPDATE" if self.dialect.name == "postgresql" else ""
        # Sent together (on PostgreSQL one round trip): the fence first, which locks the row (a post to the
        # run takes turns with it), then the items consumed and, for a run that parks, whether an answer
        # waits. Undone with the rest when the fence says the lease is lost.
        with db.pipeline() if change.consumed or status == "parked" else contextlib.nullcontext():
            fence = db.query(
                f"SELECT lease_token, version, status, last_seq, session_id, cancel_requested"
                f" FROM orchestrator_runs WHERE request_id = ?{lock}",
                (lease.request_id,),
            )
            consumed = None
            if change.consumed:
                marks = ", ".join("?" for _ in change.consumed)
                consumed = db.query(
                    "UPDATE orchestrator_inbox SET consumed = 1 WHERE request_id = ? AND consumed = 0"
                    f" AND id IN ({marks}) RETURNING id",
                    (lease.request_id, *change.consumed),
                )
            waiting = None
            if status == "parked":
                waiting = db.query(
                    "SELECT 1 FROM orchestrator_inbox WHERE request_id = ? AND consumed = 0 LIMIT 1",
                    (lease.request_id,),
                )
        held_row = fence.fetchone()
        if held_row is None or tuple(held_row[:3]) != (lease.token, lease.version, "running"):
            raise self._lost(db, lease)
        session_id, last_seq = held_row[4], int(held_row[3])
        events = []
        for event in change.events:
            if event.seq != last_seq + 1:
                raise StoreError(f"run {lease.request_id!r}: event seq {event.seq} does not follow {last_seq}")
            events.append((event.seq, event.type, _dumps(dict(event.body))))
            last_seq = event.seq
        if consumed is not None:
            taken = [int(row[0]) for row in consumed.fetchall()]
            for item_id in change.consumed:
                if item_id in taken:
                    taken.remove(item_id)
                else:
                    raise StoreError(f"run {lease.request_id!r}: inbox item {item_id} is not there to consume")
        # Queued at once instead when an answer already waits, or when it was asked to stop
        # while it ran (the claim that follows ends it cancelled: a parked run is claimed by nothing else).
        if waiting is not None and (waiting.fetchone() is not None or bool(held_row[5])):
            status = lease_step(status, "wake")
        checkpoint = _dumps(dict(change.checkpoint)) if change.checkpoint is not None else None
        held = status == "running"
        back_off = change.retry_after if status == "queued" else None
        wake_at = change.wake_at if status == "parked" else None
        trace_context = _dumps(dict(change.trace_context)) if change.trace_context else None
        messages = (*(change.history or ()), *change.messages)
        with db.pipeline():
            if change.history is not None:
                db.execute(f"DELETE FROM {self.dialect.messages_table} WHERE session_id = ?", (session_id,))
            if self.dialect.name == "postgresql":
                # The appends are data-modifying CTEs of the run's UPDATE: one statement writes them all.
                appends = self._appends(session_id, lease.request_id, messages, events, now)
            else:
                appends = []
                self._insert_messages_at_end(db, session_id, messages, now)
                self._insert_events(db, lease.request_id, events, now)
            db.execute(
                "".join(f"{'WITH' if n == 0 else ','} appended_{n} AS ({sql})" for n, (sql, _) in enumerate(appends))
                + " UPDATE orchestrator_runs SET status = ?, checkpoint = COALESCE(?, checkpoint),"
                " version = version + 1, fingerprint = COALESCE(?, fingerprint),"
                " trace_context = COALESCE(trace_context, ?),"
                " last_seq = ?, updated = ?, lease_owner = CASE WHEN ? THEN lease_owner ELSE NULL END,"
                " lease_token = CASE WHEN ? THEN lease_token ELSE NULL END,"
                " lease_expires = CASE WHEN ? THEN lease_expires ELSE NULL END,"
                f" not_before = {self.dialect.now} + ?, wake_at = ? WHERE request_id = ?",
                (
                    *(param for _, params in appends for param in params),
                    status,
                    checkpoint,
                    change.fingerprint,
                    trace_context,
                    last_seq,
                    now,
                    held,
                    held,
                    held,
                    back_off,
                    wake_at,
                    lease.request_id,
                ),
            )
            if status == "queued" or wake_at is not None:
                self._notify(db)  # a parked run's wake_at: each worker's one timer may have to fire sooner
            if change.events or status != "running":
                self._changed(db, RUN, lease.request_id)
            if notify:
                self._notify_changes(db)  # in the same round trip
        return attrs.evolve(lease, version=lease.version + 1, last_seq=last_seq)

    def release(self, lease: Lease) -> None:
        with self._transaction("release") as db:
            db.execute(
                "UPDATE orchestrator_runs SET status = ?, lease_owner = NULL, lease_token = NULL,"
                " lease_expires = NULL, not_before = NULL, version = version + 1, updated = ?"
                " WHERE request_id = ? AND lease_token = ? AND status = 'running' RETURNING request_id",
                (lease_step("running", "release", held=True), time.time(), lease.request_id, lease.token),
            )
            if db.fetchone() is None:
                raise self._lost(db, lease)
            self._notify(db)

    def expire_leases(self, owners: Sequence[str]) -> list[str]:
        """End at once the leases ``owners`` (carriers known to be gone) hold on running runs, so that the next claim
        takes those runs over without waiting for the leases to run out; the request ids of those runs. A carrier
        judged gone wrongly loses its runs as at a lease expiry: its next commit is fenced off (LeaseLost)."""
        if not owners:
            return []
        marks = ", ".join("?" for _ in owners)
        with self._transaction("expire_leases") as db:
            db.execute(
                f"UPDATE orchestrator_runs SET lease_expires = 0 WHERE status = 'running' AND lease_owner IN ({marks})"
                " RETURNING request_id",
                tuple(owners),
            )
            expired = [str(row[0]) for row in db.fetchall()]
            if expired:
                self._notify(db)
        return expired

    def _append_messages(self, db: _Cursor, session_id: str, messages: Sequence[Any], now: float) -> None:
        self._insert_messages(db, session_id, messages, self._last_position(db, session_id), now)

    def _last_position(self, db: _Cursor, session_id: str) -> int:
        table = self.dialect.messages_table
        db.execute(f"SELECT COALESCE(MAX(position), -1) FROM {table} WHERE session_id = ?", (session_id,))
        return int(db.fetchone()[0])

    def _insert_messages_at_end(self, db: _Cursor, session_id: str, messages: Sequence[Message], now: float) -> None:
        """SQLite: append ``messages`` to the session's history, each after its last position as the insert finds it
        (no read first; the write lock keeps other writers out)."""
        table = self.dialect.messages_table
        if messages:
            db.executemany(
                f"INSERT INTO {table} (session_id, position, role, body, created)"
                f" SELECT ?, COALESCE(MAX(position), -1) + 1, ?, ?, ? FROM {table} WHERE session_id = ?",
                [(session_id, message.role, encode_message(message), now, session_id) for message in messages],
            )

    def _insert_events(self, db: _Cursor, request_id: str, events: Sequence[tuple[int, str, str]], now: float) -> None:
        """SQLite: append ``events`` (each its seq, type and body as JSON text) to the run's event log."""
        if events:
            db.executemany(
                "INSERT INTO orchestrator_run_events (request_id, seq, type, body, created) VALUES (?, ?, ?, ?, ?)",
                [(request_id, seq, kind, body, now) for seq, kind, body in events],
            )

    def _appends(
        self,
        session_id: str,
        request_id: str,
        messages: Sequence[Message],
        events: Sequence[tuple[int, str, str]],
        now: float,
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """PostgreSQL: the INSERTs (each with its parameters) that append ``messages`` to the session's history, after
        its last position as the insert finds it (the run's row lock keeps other writers out), and ``events`` (each
        its seq, type and body as JSON text) to the run's event log. Each INSERT's rows are in one JSON parameter
        (each text a JSON string in it, stored as the text it holds): one statement, however many rows."""
        table = self.dialect.messages_table
        appends: list[tuple[str, tuple[Any, ...]]] = []
        if messages:
            rows = [{"n": n, "r": message.role, "b": encode_message(message)} for n, message in enumerate(messages, 1)]
            appends.append(
                (
                    f"INSERT INTO {table} (session_id, position, role, body, created)"
                    f" SELECT ?, (SELECT COALESCE(MAX(position), -1) FROM {table} WHERE session_id = ?) + m.n,"
                    " m.r, m.b, ? FROM json_to_recordset(?::json) AS m(n BIGINT, r TEXT, b TEXT)",
                    (session_id, session_id, now, _dumps(rows)),
                )
            )
        if events:
            appends.append(
                (
                    "INSERT INTO orchestrator_run_events (request_id, seq, type, body, created)"
                    " SELECT ?, e.s, e.t, e.b, ? FROM json_to_recordset(?::json) AS e(s BIGINT, t TEXT, b TEXT)",
                    (request_id, now, _dumps([{"s": seq, "t": kind, "b": body} for seq, kind, body in events])),
                )
            )
        return appends

    def _insert_messages(self, db: _Cursor, session_id: str, messages: Sequence[Any], last: int, now: float) -> None:
        """Append ``messages`` to the session's history after position ``last``."""
        rows = [
            (session_id, last + offset, message.role, encode_message(message), now)
            for offset, message in enumerate(messages, start=1)
        ]
        if rows:
            db.executemany(
                f"INSERT INTO {self.dialect.messages_table} (session_id, position, role, body, created)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )

    # events and inbox -------------------------------------------------------

    def events(self, request_id: str, after: int = 0, limit: int = 500) -> list[StoredEvent]:
        with self._transaction("events") as db:
            db.execute(
                "SELECT seq, type, body FROM orchestrator_run_events WHERE request_id = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (request_id, after, limit),
            )
            return [StoredEvent(request_id, int(seq), kind, json.loads(body)) for seq, kind, body in db.fetchall()]

    def post(
        self, item: NewInboxItem, check: Callable[[RunRecord], str | None] | None = None
    ) -> tuple[InboxItem, bool]:
        """Race-free on every node: the run's row is locked first, so posts to one run (and its worker's
        commits) take turns; a key another run's post holds is settled by the insert itself
        (``ON CONFLICT``), which then reads the winner's item in the same transaction."""
        now = time.time()
        digest = _body_digest(item)
        with self._transaction("post") as db:
            row = self._row(db, item.request_id, lock=True)
            if item.idempotency_key is not None:
                found = self._inbox_by_key(db, item.session_id, item.idempotency_key, digest)
                if found is not None:
                    return found, False
            if row is None:
                raise UnknownRunRow(item.request_id)
            if row.status in FINAL:
                raise StoreError(f"run {item.request_id!r} has ended ({row.status})")
            problem = check(row) if check is not None else None
            if problem is not None:
                raise InboxRefused(item.request_id, problem)
            self._refuse_second_answer(db, item)
            db.execute(
                "INSERT INTO orchestrator_inbox (session_id, request_id, name, payload, idempotency_key, body_digest,"
                " consumed, created) VALUES (?, ?, ?, ?, ?, ?, 0, ?)"
                " ON CONFLICT (session_id, idempotency_key) DO NOTHING RETURNING id",
                (
                    item.session_id,
                    item.request_id,
                    item.name,
                    _dumps(dict(item.payload)),
                    item.idempotency_key,
                    digest if item.idempotency_key is not None else None,
                    now,
                ),
            )
            inserted = db.fetchone()
            if inserted is None:
                assert item.idempotency_key is not None  # only a key can conflict
                winner = self._inbox_by_key(db, item.session_id, item.idempotency_key, digest)
                if winner is None:
                    raise StoreError(f"idempotency key {item.idempotency_key!r} conflicted but its item is gone")
                return winner, False
            (new_id,) = inserted
            if row.status == "parked":
                db.execute(
                    "UPDATE orchestrator_runs SET status = ?, updated = ? WHERE request_id = ?",
                    (lease_step(row.status, "wake"), now, item.request_id),
                )
                self._notify(db)  # it may be claimed now; a run carried or queued already needs no worker woken
            self._changed(db, INBOX, item.request_id)
        stored = InboxItem(
            int(new_id), item.session_id, item.request_id, item.name, dict(item.payload), item.idempotency_key, now
        )
        return stored, True

    def _refuse_second_answer(self, db: _Cursor, item: NewInboxItem) -> None:
        """AnswerWaiting when ``item`` answers a call (its payload names a ``tool_call_id``) whose answer
        already waits unconsumed in the run's inbox (the caller holds the run's row lock)."""
        call_id = item.payload.get("tool_call_id")
        if not isinstance(call_id, str):
            return
        db.execute(
            "SELECT payload FROM orchestrator_inbox WHERE request_id = ? AND name = ? AND consumed = 0",
            (item.request_id, item.name),
        )
        for (payload,) in db.fetchall():
            earlier = json.loads(payload)
            if isinstance(earlier, dict) and earlier.get("tool_call_id") == call_id:
                raise AnswerWaiting(item.request_id, call_id)

    def _inbox_by_key(self, db: _Cursor, session_id: str, key: str, digest: str) -> InboxItem | None:
        """The item ``key`` posted in ``session_id``, or None; InboxKeyReused when it was posted with another body."""
        db.execute(
            "SELECT id, session_id, request_id, name, payload, idempotency_key, created, body_digest"
            " FROM orchestrator_inbox WHERE session_id = ? AND idempotency_key = ?",
            (session_id, key),
        )
        row = db.fetchone()
        if row is None:
            return None
        if row[7] is not None and row[7] != digest:
            raise InboxKeyReused(session_id, key)
        return _inbox_item(row)

    def inbox(self, request_id: str, *, after_id: int = 0) -> list[InboxItem]:
        with self._transaction("inbox") as db:
            db.execute(
                "SELECT id, session_id, request_id, name, payload, idempotency_key, created FROM orchestrator_inbox"
                " WHERE request_id = ? AND consumed = 0 AND id > ? ORDER BY id",
                (request_id, after_id),
            )
            return [_inbox_item(row) for row in db.fetchall()]

    def cancel(
        self,
        request_id: str,
        final_event: Callable[[int], StoredEvent],
        settle: Callable[[RunRecord, list[Message]], Sequence[Message]] | None = None,
    ) -> RunRecord:
        now = time.time()
        with self._transaction("cancel") as db:
            row = self._row(db, request_id, lock=True)
            if row is None:
                raise UnknownRunRow(request_id)
            if row.status in FINAL:
                return row
            if row.status == "running":
                db.execute(
                    "UPDATE orchestrator_runs SET cancel_requested = 1, updated = ? WHERE request_id = ?",
                    (now, request_id),
                )
            else:
                if settle is not None:
                    settled = settle(row, self._history(db, row.session_id))
                    if settled:
                        self._append_messages(db, row.session_id, settled, now)
                event = final_event(row.last_seq + 1)
                db.execute(
                    "INSERT INTO orchestrator_run_events (request_id, seq, type, body, created) VALUES (?, ?, ?, ?, ?)",
                    (request_id, event.seq, event.type, _dumps(dict(event.body)), now),
                )
                db.execute(
                    "UPDATE orchestrator_runs SET status = ?, last_seq = ?, version = version + 1,"
                    " updated = ? WHERE request_id = ?",
                    (lease_step(row.status, "cancel"), event.seq, now, request_id),
                )
                self._changed(db, RUN, request_id)
            self._notify(db)
            changed = self._row(db, request_id)
        assert changed is not None
        return changed

    def history(self, session_id: str) -> list[Message]:
        with self._transaction("history") as db:
            return self._history(db, session_id)

    def _history(self, db: _Cursor, session_id: str) -> list[Message]:
        return self._histories(db, [session_id])[session_id]

    def _histories(self, db: _Cursor, session_ids: Sequence[str]) -> dict[str, list[Message]]:
        """The history of each of ``session_ids`` (an empty one for a session without messages), in one read."""
        histories: dict[str, list[Message]] = {session_id: [] for session_id in session_ids}
        table = self.dialect.messages_table
        marks = ", ".join("?" for _ in session_ids)
        db.execute(
            f"SELECT session_id, position, body FROM {table} WHERE session_id IN ({marks})"
            " ORDER BY session_id, position",
            list(session_ids),
        )
        for session_id, position, body in db.fetchall():
            histories[session_id].append(_stored_message(position, body))
        return histories

    def sessions(self) -> list[str]:
        table = self.dialect.messages_table
        with self._transaction("sessions") as db:
            db.execute(
                f"SELECT session_id FROM (SELECT session_id, MIN(created) AS first FROM orchestrator_runs"
                f" GROUP BY session_id UNION ALL SELECT session_id, MIN(created) FROM {table} GROUP BY session_id)"
                f" AS known GROUP BY session_id ORDER BY MIN(first), session_id"
            )
            return [row[0] for row in db.fetchall()]

    def fork(self, source: str, target: str, *, turns: int | None = None, owner: str | None = None) -> int:
        try:
            with self._transaction("fork") as db:
                if self.dialect.name == "postgresql":
                    # One snapshot for the whole copy: no run of the source may end or start between the check
                    # that none runs and the read of its messages.
                    db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                if not self._known(db, source):
                    raise ForkRefused(f"no stored session {source!r} to fork")
                if self._known(db, target):
                    raise ForkRefused(f"the session {target!r} exists already", "exists")
                db.execute(
                    f"SELECT 1 FROM orchestrator_runs WHERE session_id = ? AND status IN {_ACTIVE_SQL}", (source,)
                )
                if db.fetchone() is not None:
                    raise SessionBusy(source)
                messages = first_turns(source, self._history(db, source), turns)
                if not messages:
                    return 0
                self._insert_messages(db, target, messages, -1, time.time())
                if owner is not None and owner != LOCAL_PRINCIPAL:
                    db.execute(
                        "INSERT INTO orchestrator_session_owners (session_id, owner) VALUES (?, ?)", (target, owner)
                    )
                db.execute("SELECT title FROM orchestrator_session_titles WHERE session_id = ?", (source,))
                titled = db.fetchone()
                if titled is not None:
                    db.execute(
                        "INSERT INTO orchestrator_session_titles (session_id, title) VALUES (?, ?)",
                        (target, forked_title(titled[0])),
                    )
        except (sqlite3.IntegrityError, _pg_error("IntegrityError")) as clash:
            # Another fork (or a run's first messages) took the target between the check and the copy.
            raise ForkRefused(f"the session {target!r} exists already", "exists") from clash
        return len(messages)

    def set_title(self, session_id: str, title: str) -> bool:
        with self._transaction("set_title") as db:
            if not self._known(db, session_id):
                return False
            db.execute(
                "INSERT INTO orchestrator_session_titles (session_id, title) VALUES (?, ?)"
                " ON CONFLICT (session_id) DO UPDATE SET title = excluded.title",
                (session_id, clean_text(title)),
            )
        return True

    def _known(self, db: _Cursor, session_id: str) -> bool:
        """Whether the session has a run or a stored message."""
        db.execute(
            f"SELECT 1 WHERE EXISTS (SELECT 1 FROM orchestrator_runs WHERE session_id = ?)"
            f" OR EXISTS (SELECT 1 FROM {self.dialect.messages_table} WHERE session_id = ?)",
            (session_id, session_id),
        )
        return db.fetchone() is not None

    def titles(self, session_ids: Sequence[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(session_ids))
        found: dict[str, str] = {}
        table = self.dialect.messages_table
        with self._transaction("titles") as db:
            for start in range(0, len(wanted), _IN_LIST):
                chunk = wanted[start : start + _IN_LIST]
                marks = ", ".join("?" for _ in chunk)
                # Each session's first user message: one row per session, read through the primary key.
                db.execute(
                    f"SELECT first.session_id, first.position, first.body FROM {table} AS first"
                    f" WHERE first.session_id IN ({marks}) AND first.role = 'user' AND first.position ="
                    f" (SELECT MIN(earlier.position) FROM {table} AS earlier"
                    f" WHERE earlier.session_id = first.session_id AND earlier.role = 'user')",
                    chunk,
                )
                for session_id, position, body in db.fetchall():
                    try:
                        message: Message = decode_message(body)
                    except UndecodableMessage as problem:
                        message = placeholder(int(position), str(problem))
                    found[session_id] = first_input_title([message])
                db.execute(
                    f"SELECT session_id, title FROM orchestrator_session_titles WHERE session_id IN ({marks})", chunk
                )
                found.update((session_id, title) for session_id, title in db.fetchall())
        return found

    def set_titles(self, session_ids: Sequence[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(session_ids))
        found: dict[str, str] = {}
        with self._transaction("set_titles") as db:
            for start in range(0, len(wanted), _IN_LIST):
                chunk = wanted[start : start + _IN_LIST]
                marks = ", ".join("?" for _ in chunk)
                db.execute(
                    f"SELECT session_id, title FROM orchestrator_session_titles WHERE session_id IN ({marks})", chunk
                )
                found.update((session_id, title) for session_id, title in db.fetchall())
        return found

    def delete_session(self, session_id: str, *, cancel: bool = False, ended_only: bool = False) -> bool:
        found = 0
        busy = ACTIVE if ended_only else frozenset({"running"})
        with self._transaction("delete_session") as db:
            lock = " FOR UPDATE" if self.dialect.name == "postgresql" else ""
            db.execute(f"SELECT request_id, status FROM orchestrator_runs WHERE session_id = ?{lock}", (session_id,))
            runs = db.fetchall()
            if not cancel and any(status in busy for _, status in runs):
                raise SessionBusy(session_id)
            for (request_id, _) in runs:
                db.execute("DELETE FROM orchestrator_run_events WHERE request_id = ?", (request_id,))
            for table in ("orchestrator_inbox", "orchestrator_runs", self.dialect.messages_table):
                db.execute(f"DELETE FROM {table} WHERE session_id = ? RETURNING 1", (session_id,))
                found += len(db.fetchall())
            db.execute("DELETE FROM orchestrator_session_titles WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM orchestrator_session_owners WHERE session_id = ?", (session_id,))
        return found > 0 or bool(runs)

    def prune_sessions(self, idle_before: float) -> list[str]:
        table = self.dialect.messages_table
        now = time.time()
        with self._transaction("prune_sessions") as db:
            db.execute(
                f"SELECT session_id FROM (SELECT session_id, MAX(updated) AS last FROM orchestrator_runs"
                f" GROUP BY session_id UNION ALL SELECT session_id, MAX(created) FROM {table} GROUP BY session_id)"
                f" AS known GROUP BY session_id HAVING MAX(last) < ? ORDER BY session_id",
                (idle_before,),
            )
            idle = [row[0] for row in db.fetchall()]
            gone: list[str] = []
            for session_id in idle:
                db.execute(
                    f"SELECT 1 FROM orchestrator_runs WHERE session_id = ? AND status IN {_ACTIVE_SQL}", (session_id,)
                )
                if db.fetchone() is not None:
                    continue  # a live or parked run is never pruned
                # Only final runs go: a run started meanwhile (not yet visible to the check above) stays.
                db.execute(
                    f"SELECT request_id FROM orchestrator_runs WHERE session_id = ? AND status IN {_FINAL_SQL}",
                    (session_id,),
                )
                ended = [row[0] for row in db.fetchall()]
                self._bury(db, ended, "idle_session", now)
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
                db.execute("DELETE FROM orchestrator_session_titles WHERE session_id = ?", (session_id,))
                db.execute("DELETE FROM orchestrator_session_owners WHERE session_id = ?", (session_id,))
                gone.append(session_id)
        return gone

    def prune(self, older_than: float) -> int:
        # A session's newest run, when it has an owner, keeps its row (not its events or inbox): the history
        # outlives the runs, and the owner is known from the rows alone.
        newest_owned = (
            "run.owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM orchestrator_runs AS later"
            " WHERE later.session_id = run.session_id AND (later.created > run.created"
            " OR (later.created = run.created AND later.request_id > run.request_id)))"
        )
        with self._transaction("prune") as db:
            db.execute(
                f"SELECT request_id, CASE WHEN {newest_owned} THEN 1 ELSE 0 END FROM orchestrator_runs AS run"
                f" WHERE status IN {_FINAL_SQL} AND updated < ?",
                (older_than,),
            )
            found = [(row[0], bool(row[1])) for row in db.fetchall()]
            for request_id in [request_id for request_id, keeps_owner in found if keeps_owner]:
                db.execute("DELETE FROM orchestrator_run_events WHERE request_id = ?", (request_id,))
                db.execute("DELETE FROM orchestrator_inbox WHERE request_id = ?", (request_id,))
            gone = [request_id for request_id, keeps_owner in found if not keeps_owner]
            self._bury(db, gone, "ended", time.time())
        return len(gone)

    def _bury(self, db: _Cursor, request_ids: Sequence[str], reason: str, now: float) -> None:
        """Delete the runs ``request_ids`` (their events, inbox and row), remembering each id as pruned."""
        for request_id in request_ids:
            db.execute("DELETE FROM orchestrator_run_events WHERE request_id = ?", (request_id,))
            db.execute("DELETE FROM orchestrator_inbox WHERE request_id = ?", (request_id,))
            db.execute("DELETE FROM orchestrator_runs WHERE request_id = ?", (request_id,))
            db.execute(
                "INSERT INTO orchestrator_pruned_runs (request_id, reason, pruned) VALUES (?, ?, ?)"
                " ON CONFLICT (request_id) DO UPDATE SET reason = excluded.reason, pruned = excluded.pruned",
                (request_id, reason, now),
            )

    def pruned(self, request_id: str) -> PrunedRun | None:
        with self._transaction("pruned") as db:
            db.execute(
                "SELECT request_id, reason, pruned FROM orchestrator_pruned_runs WHERE request_id = ?", (request_id,)
            )
            row = db.fetchone()
        return PrunedRun(row[0], row[1], float(row[2])) if row is not None else None

    def forget_pruned(self, before: float) -> int:
        with self._transaction("forget_pruned") as db:
            db.execute("DELETE FROM orchestrator_pruned_runs WHERE pruned < ? RETURNING 1", (before,))
            return len(db.fetchall())

    def lock_session(self, session_id: str) -> SessionLock | None:
        return None if self._session_locks is None else self._session_locks.acquire(session_id)

    @property
    def shares_session_locks(self) -> bool:
        """True on an SQLite file (its session stores' lock files); False on PostgreSQL and in memory."""
        return self._session_locks is not None

    def wait_for_work(self, timeout: float) -> None:
        if self._listen is None:
            time.sleep(min(timeout, 0.1))
            return
        try:
            if self._listener is None:
                self._listener = self._listen()
                self._listener.execute(f"LISTEN {WAKE_CHANNEL}")
            for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                break
        except Exception as error:
            # A broken listening connection is made again by the next wait.
            listener, self._listener = self._listener, None
            if listener is not None:
                with contextlib.suppress(Exception):
                    listener.close()
            raise StoreUnavailable(f"{self.where}: waiting for work: {one_line(error)}") from error

    def close(self) -> None:
        self._closed.set()
        if self._session_locks is not None:
            self._session_locks.release_all()
        for feed in list(self._feeds):
            feed.close()
        with self._lock:
            if self._db is not None:
                self._db.close()
            if self._listener is not None:
                self._listener.close()
                self._listener = None
        self._drop_idle()


class OneCommitFailed(Exception):
    """A commit of a group made without savepoints failed: the group's transaction is rolled back (its metric's
    ``error.type``), and the group made again, each commit in a savepoint of its own."""


def _heard(notes: Iterable[Any]) -> tuple[set[tuple[str, str]], bool]:
    """The (topic, request id) pairs the notifications ``notes`` name, and whether one said anything may have
    changed."""
    keys: set[tuple[str, str]] = set()
    everything = False
    for note in notes:
        if note.channel == CHANGE_CHANNEL:
            named = changed_keys(note.payload)
            if named is None:
                everything = True
            else:
                keys |= named
        elif note.channel == WAKE_CHANNEL:
            keys.add((WORK, ""))
        else:  # PER_RUN_CHANNEL, from a process of an earlier version
            topic, _, request_id = note.payload.partition(":")
            keys.add((topic, request_id))
    return keys, everything


class _Dialected:
    """A cursor whose statements are written with ``?`` placeholders, and the changes its transaction made."""

    def __init__(self, cursor: Any, dialect: Dialect) -> None:
        self._cursor = cursor
        self._dialect = dialect
        self.changed: set[tuple[str, str]] = set()
        self.notified: set[tuple[str, str]] = set()  # changes whose NOTIFY was sent already

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._cursor.execute(self._dialect.sql(sql), tuple(params))

    def query(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """``sql`` on a cursor of its own, whose rows are read later (``fetchone``, ``fetchall``): statements sent
        this way in a ``pipeline`` block share one round trip, and each keeps its rows."""
        cursor = self._cursor.connection.cursor()
        cursor.execute(self._dialect.sql(sql), tuple(params))
        return cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """``sql`` once per row (on PostgreSQL pipelined: one round trip for them all)."""
        self._cursor.executemany(self._dialect.sql(sql), [tuple(row) for row in rows])

    def pipeline(self) -> AbstractContextManager[Any]:
        """On PostgreSQL, statements whose results are not read go out together, in one round trip at the end
        of the block (an error in one is raised there); elsewhere nothing changes."""
        if self._dialect.name == "postgresql":
            return cast("AbstractContextManager[Any]", self._cursor.connection.pipeline())
        return contextlib.nullcontext()

    def nested(self) -> AbstractContextManager[Any]:
        """PostgreSQL: a savepoint, rolled back to when the block raises."""
        return cast("AbstractContextManager[Any]", self._cursor.connection.transaction())

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cursor.fetchall())


def _pg_error(kind: str = "Error") -> type[Exception]:
    """psycopg's error class named ``kind`` (``Error``, ``IntegrityError``), or sqlite3's of that name when psycopg is
    not installed."""
    try:
        import psycopg
    except ImportError:
        fallback: type[Exception] = getattr(sqlite3, kind)
        return fallback
    error: type[Exception] = getattr(psycopg, kind)
    return error


def is_run_store_url(url: str) -> bool:
    """Whether ``url`` names a run store: ``postgresql://...`` or ``sqlite:///PATH``."""
    return url.startswith(("postgresql://", "postgres://", "sqlite:///"))


def open_run_store(url: str) -> SQLRunStore:
    """The run store ``url`` names (see ``is_run_store_url``); ValueError for anything else."""
    if url.startswith(("postgresql://", "postgres://")):
        return postgres_run_store(url)
    if url.startswith("sqlite:///"):
        return sqlite_run_store(url[len("sqlite:///") :])
    raise ValueError(f"not a run store URL: {url!r} (use postgresql://... or sqlite:///PATH)")


def sqlite_run_store(path: str) -> SQLRunStore:
    """Runs in the SQLite file ``path`` (beside the session store's tables); UnusableLocation when it cannot be."""

    def prepare(db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA busy_timeout=30000")
        refuse_newer_sessions(db, path)
        db.execute(
            "CREATE TABLE IF NOT EXISTS messages (session_id TEXT NOT NULL, position INTEGER NOT NULL,"
            " role TEXT NOT NULL, body TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (session_id, position))"
        )

    def connect() -> sqlite3.Connection:
        return open_sqlite(path, prepare, isolation_level=None, check_same_thread=False, timeout=30)

    return SQLRunStore(SQLITE, connect, path)


def postgres_run_store(dsn: str, *, connect_timeout: int = 10, pool_size: int = POOL_SIZE) -> SQLRunStore:
    """Runs in the PostgreSQL database ``dsn`` (psycopg 3, synchronous: call it from worker threads),
    over up to ``pool_size`` connections."""
    import psycopg

    def connect() -> Any:
        db = psycopg.connect(dsn, connect_timeout=connect_timeout)
        with db.transaction():
            # Under the schema's lock: two processes making the table at once would collide in the catalogue.
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            db.execute(
                "CREATE TABLE IF NOT EXISTS orchestrator_messages (row_id BIGSERIAL PRIMARY KEY,"
                " session_id TEXT NOT NULL, position BIGINT NOT NULL, role TEXT NOT NULL, body TEXT NOT NULL,"
                " created DOUBLE PRECISION NOT NULL, UNIQUE (session_id, position))"
            )
        return db

    def listen() -> Any:
        return psycopg.connect(dsn, connect_timeout=connect_timeout, autocommit=True)

    shown = dsn.split("@")[-1]
    return SQLRunStore(POSTGRES, connect, f"postgresql {shown}", listen=listen, pool_size=pool_size)


__all__ += ["ACTIVE", "FINAL"]

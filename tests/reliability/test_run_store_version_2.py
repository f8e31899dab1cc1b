"""A version-1 run store is migrated to version 2 on open (SQLite and PostgreSQL): its rows are kept, its inbox
keys become unique per session with a body digest, and runs get their give-back back-off."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.store.runs import InboxKeyReused, NewInboxItem, RunCommit
from orchestrator.store.runs_sql import RUN_SCHEMA_VERSION, open_run_store
from tests.reliability.test_old_run_store import Database


def _version_1_tables(real: str, serial: str) -> list[str]:
    """The run store's tables as version 1 wrote them (an inbox key unique across the database)."""
    return [
        f"""CREATE TABLE orchestrator_runs (
            request_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, status TEXT NOT NULL, input TEXT NOT NULL,
            checkpoint TEXT, version BIGINT NOT NULL DEFAULT 0, last_seq BIGINT NOT NULL DEFAULT 0,
            lease_owner TEXT, lease_token TEXT, lease_expires {real}, cancel_requested INTEGER NOT NULL DEFAULT 0,
            created {real} NOT NULL, updated {real} NOT NULL)""",
        "CREATE UNIQUE INDEX orchestrator_one_active_run ON orchestrator_runs (session_id)"
        " WHERE status IN ('queued', 'running', 'parked')",
        f"""CREATE TABLE orchestrator_run_events (request_id TEXT NOT NULL, seq BIGINT NOT NULL, type TEXT NOT NULL,
            body TEXT NOT NULL, created {real} NOT NULL, PRIMARY KEY (request_id, seq))""",
        f"""CREATE TABLE orchestrator_inbox (id {serial}, session_id TEXT NOT NULL, request_id TEXT NOT NULL,
            name TEXT NOT NULL, payload TEXT NOT NULL, idempotency_key TEXT UNIQUE, consumed INTEGER NOT NULL DEFAULT 0,
            created {real} NOT NULL)""",
        "CREATE INDEX orchestrator_inbox_run ON orchestrator_inbox (request_id, consumed, id)",
        "CREATE TABLE orchestrator_run_schema (version INTEGER NOT NULL)",
        "INSERT INTO orchestrator_run_schema (version) VALUES (1)",
    ]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        return Database(f"sqlite:///{tmp_path / 'runs.db'}")
    return Database(request.getfixturevalue("postgres_dsn"))


def test_a_version_1_store_is_migrated_to_version_2_with_its_rows(database: Database) -> None:
    postgres = ("DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY")
    real, serial = postgres if database.postgres else ("REAL", "INTEGER PRIMARY KEY AUTOINCREMENT")
    for statement in _version_1_tables(real, serial):
        database.execute(statement)
    now = time.time()
    for session_id, request_id in (("s1", "r1"), ("s2", "r2")):
        database.execute(
            "INSERT INTO orchestrator_runs (request_id, session_id, status, input, version, last_seq, created, updated)"
            " VALUES (?, ?, 'parked', '{\"role\": \"user\", \"content\": \"hi\"}', 3, 0, ?, ?)",
            request_id,
            session_id,
            now,
            now,
        )
    database.execute(
        "INSERT INTO orchestrator_inbox (session_id, request_id, name, payload, idempotency_key, consumed, created)"
        " VALUES ('s1', 'r1', 'steering_message', '{\"content\": \"first\"}', 'key-1', 0, ?)",
        now,
    )

    store = open_run_store(database.url)
    try:
        assert RUN_SCHEMA_VERSION >= 2
        assert store.schema_version() == RUN_SCHEMA_VERSION
        assert database.execute("SELECT version FROM orchestrator_run_schema") == [(RUN_SCHEMA_VERSION,)]
        (kept,) = store.inbox("r1")
        assert (kept.idempotency_key, kept.payload) == ("key-1", {"content": "first"})
        # The key is unique per session now: another session's run takes it too.
        item, added = store.post(NewInboxItem("s2", "r2", "steering_message", {"content": "second"}, "key-1"))
        assert added and item.request_id == "r2"
        # Within its session, a retry with the same body is the first item; another body is refused.
        again, added_again = store.post(NewInboxItem("s2", "r2", "steering_message", {"content": "second"}, "key-1"))
        assert (again.id, added_again) == (item.id, False)
        with pytest.raises(InboxKeyReused):
            store.post(NewInboxItem("s2", "r2", "steering_message", {"content": "other"}, "key-1"))
        # New items continue the migrated ids.
        later, _ = store.post(NewInboxItem("s1", "r1", "steering_message", {"content": "later"}))
        assert later.id > kept.id and later.id > item.id
        # Runs have their back-off column: a give-back with retry_after is not claimed at once.
        (lease,) = store.claim("w", 30.0, limit=1)
        store.commit(lease, RunCommit(status="queued", retry_after=30.0))
        claimed = store.claim("w", 30.0, limit=5)
        assert lease.request_id not in [c.request_id for c in claimed]
    finally:
        store.close()

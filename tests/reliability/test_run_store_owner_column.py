"""A run store of an earlier version gets the runs' ``owner`` column on open (SQLite and PostgreSQL); the runs
it kept have none, so their sessions belong to ``local`` and another principal cannot take them."""

from __future__ import annotations

import time

import pytest

from orchestrator.store.errors import SessionOwned
from orchestrator.store.runs import LOCAL_PRINCIPAL
from orchestrator.store.runs_sql import open_run_store
from tests.reliability.test_old_run_store import Database
from tests.reliability.test_run_store_version_2 import _version_1_tables, database

__all__ = ["database"]


def test_runs_kept_before_the_owner_column_belong_to_local(database: Database) -> None:
    postgres = ("DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY")
    real, serial = postgres if database.postgres else ("REAL", "INTEGER PRIMARY KEY AUTOINCREMENT")
    for statement in _version_1_tables(real, serial):
        database.execute(statement)
    now = time.time()
    database.execute(
        "INSERT INTO orchestrator_runs (request_id, session_id, status, input, version, last_seq, created, updated)"
        " VALUES ('r1', 's1', 'completed', '{\"role\": \"user\", \"content\": \"hi\"}', 1, 0, ?, ?)",
        now,
        now,
    )
    store = open_run_store(database.url)
    try:
        assert store.owners(["s1", "s2"]) == {"s1": LOCAL_PRINCIPAL}
        with pytest.raises(SessionOwned, match="'s1' belongs to another principal"):
            store.create_run("s1", "r2", {"role": "user", "content": "mine"}, owner="alice")
        store.create_run("s2", "r3", {"role": "user", "content": "mine"}, owner="alice")
        assert store.owners(["s1", "s2"]) == {"s1": LOCAL_PRINCIPAL, "s2": "alice"}
        store.create_run("s1", "r4", {"role": "user", "content": "again"})  # no identities: nothing checked
    finally:
        store.close()

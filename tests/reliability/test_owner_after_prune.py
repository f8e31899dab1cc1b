"""A session keeps its owner when a worker prunes its ended runs: the owner is the run rows' ``owner``, and the
session's history outlives those runs, so its newest owned run row stays (without its events and inbox)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.messages import UserMessage
from orchestrator.store.errors import SessionOwned
from orchestrator.store.runs import LOCAL_PRINCIPAL, Lease, RunCommit, StoredEvent
from orchestrator.store.runs_sql import SQLRunStore, postgres_run_store, sqlite_run_store


def _completed(store: SQLRunStore, session_id: str, request_id: str, owner: str | None) -> None:
    store.create_run(session_id, request_id, {"role": "user", "content": "hi"}, owner=owner)
    [lease] = store.claim("w", 30)
    assert isinstance(lease, Lease) and lease.request_id == request_id
    event = StoredEvent(request_id, 1, "run_completed", {"type": "run_completed"})
    store.commit(lease, RunCommit(status="completed", messages=(UserMessage("hi"),), events=(event,)))


def _check(store: SQLRunStore) -> None:
    _completed(store, "alice-notes", "r1", "alice")
    _completed(store, "alice-notes", "r2", "alice")
    _completed(store, "old-notes", "r3", None)
    assert store.owners(["alice-notes", "old-notes", "nobody"]) == {"alice-notes": "alice", "old-notes": "local"}

    pruned = store.prune(time.time() + 1)

    assert pruned == 2  # r1 and r3; r2 keeps its row
    assert store.owners(["alice-notes", "old-notes"]) == {"alice-notes": "alice", "old-notes": LOCAL_PRINCIPAL}
    assert [run.request_id for run in store.runs("alice-notes")] == ["r2"]
    assert store.events("r2") == []
    with pytest.raises(SessionOwned):
        store.create_run("alice-notes", "r4", {"role": "user", "content": "mine"}, owner="bob")
    store.create_run("alice-notes", "r5", {"role": "user", "content": "again"}, owner="alice")
    assert store.prune(time.time() + 1) == 1  # r2 goes now that r5 carries the owner
    assert [run.request_id for run in store.runs("alice-notes")] == ["r5"]


def test_a_pruned_session_keeps_its_owner_on_sqlite(tmp_path: Path) -> None:
    _check(sqlite_run_store(str(tmp_path / "runs.db")))


def test_a_pruned_session_keeps_its_owner_on_postgres(postgres_dsn: str) -> None:
    _check(postgres_run_store(postgres_dsn))

"""A version-2 run store is migrated to version 3 on open (SQLite and PostgreSQL): its runs are kept, with no
trace context and no settings of their own; new runs keep both, and a commit adds a trace context only where
the run has none."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.store.runs import RunCommit
from orchestrator.store.runs_sql import RUN_SCHEMA_VERSION, open_run_store
from tests.reliability.test_old_run_store import Database

TRACED = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        return Database(f"sqlite:///{tmp_path / 'runs.db'}")
    return Database(request.getfixturevalue("postgres_dsn"))


def test_a_version_2_store_gets_the_columns_and_keeps_its_runs(database: Database) -> None:
    open_run_store(database.url).close()  # today's tables; made version 2 again below
    database.execute("DROP INDEX orchestrator_runs_wake")
    database.execute("ALTER TABLE orchestrator_runs DROP COLUMN wake_at")
    database.execute("ALTER TABLE orchestrator_runs DROP COLUMN trace_context")
    database.execute("ALTER TABLE orchestrator_runs DROP COLUMN settings")
    database.execute("ALTER TABLE orchestrator_runs DROP COLUMN fingerprint")
    database.execute("ALTER TABLE orchestrator_runs DROP COLUMN owner")
    database.execute("UPDATE orchestrator_run_schema SET version = 2")
    database.execute(
        "INSERT INTO orchestrator_runs (request_id, session_id, status, input, version, last_seq, cancel_requested,"
        " created, updated) VALUES ('old', 's0', 'queued', '{\"role\": \"user\", \"content\": \"hi\"}', 0, 0, 0, 1, 1)"
    )

    store = open_run_store(database.url)
    try:
        assert store.schema_version() == RUN_SCHEMA_VERSION == 3
        old = store.run("old")
        assert old is not None and (old.trace_context, old.settings, old.unreadable) == (None, None, None)

        settings = {"model_settings": {"temperature": 0.2}}
        store.create_run("s1", "r1", {"role": "user", "content": "hi"}, trace_context=TRACED, settings=settings)
        new = store.run("r1")
        assert new is not None and (new.trace_context, new.settings) == (TRACED, settings)

        (lease,) = [lease for lease in store.claim("w", 30.0, 2) if lease.request_id == "old"]
        lease = store.commit(lease, RunCommit(trace_context=TRACED))
        assert store.run("old").trace_context == TRACED  # type: ignore[union-attr]
        later = {"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}
        store.commit(lease, RunCommit(trace_context=later))
        assert store.run("old").trace_context == TRACED  # type: ignore[union-attr]  # the first one stays
    finally:
        store.close()


def test_a_trace_context_that_is_not_json_leaves_the_run_untraced_and_bad_settings_are_reported(
    tmp_path: Path,
) -> None:
    database = Database(f"sqlite:///{tmp_path / 'runs.db'}")
    store = open_run_store(database.url)
    try:
        store.create_run("s1", "r1", {"role": "user", "content": "hi"})
        database.execute("UPDATE orchestrator_runs SET trace_context = 'not json', settings = '[1]'")
        record = store.run("r1")
        assert record is not None and (record.trace_context, record.settings) == (None, None)
        assert record.unreadable is not None
        assert record.unreadable == "its settings is list, not an object"  # a run that cannot be resumed as asked
    finally:
        store.close()

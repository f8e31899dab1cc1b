"""Which run stores share session locks with the session stores of their database: a carrier asks ``lock_session``
only of those (``RunStore.shares_session_locks``), and the others never hold one."""

from __future__ import annotations

from orchestrator.store.runs_sql import SQLRunStore, sqlite_run_store


def test_a_run_store_shares_session_locks_only_on_an_sqlite_file(store: SQLRunStore) -> None:
    on_file = store.dialect.name == "sqlite"
    assert store.shares_session_locks is on_file
    held = store.lock_session("s1")
    assert (held is not None) is on_file
    if held is not None:
        held.release()
    in_memory = sqlite_run_store(":memory:")
    try:
        assert in_memory.shares_session_locks is False
        assert in_memory.lock_session("s1") is None
    finally:
        in_memory.close()

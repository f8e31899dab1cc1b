"""PostgresStore after its connection broke: it connects again, and takes its session locks again.

The store's connection is ended from the server's side (``pg_terminate_backend``,
as a restart or a proxy would), on the throwaway server of ``tests/pg.py``. A
second store stands for another process sharing the database.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.messages import AssistantMessage, UserMessage
from orchestrator.store.errors import SessionLocked, SessionLost, StoreUnavailable
from orchestrator.store.interface import SessionChange
from tests.pg import end_connections

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

from orchestrator.store.postgres import PostgresStore  # noqa: E402


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[PostgresStore]:
    made = PostgresStore(postgres_dsn)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def other(postgres_dsn: str) -> Iterator[PostgresStore]:
    """Another process's store (made when first asked for: after the cut, in these tests)."""
    made = PostgresStore(postgres_dsn)
    try:
        yield made
    finally:
        made.close()


def said(text: str, at: int) -> SessionChange:
    return SessionChange(append=((at, UserMessage(text)), (at + 1, AssistantMessage(f"re: {text}"))))


def test_the_call_a_broken_connection_fails_is_store_unavailable_and_the_next_goes_on_with_its_locks(
    store: PostgresStore, postgres_dsn: str, request: pytest.FixtureRequest
) -> None:
    lock = store.lock_session("s1")
    store.apply("s1", said("one", 0))
    assert end_connections(postgres_dsn) >= 1
    with pytest.raises(StoreUnavailable, match="connection was lost"):
        store.rows("s1")
    store.apply("s1", said("two", 2))  # connected again, its lock taken again
    assert [r.position for r in store.rows("s1")] == [0, 1, 2, 3]
    other: PostgresStore = request.getfixturevalue("other")
    with pytest.raises(SessionLocked):
        other.lock_session("s1")
    lock.release()
    other.lock_session("s1").release()


def test_a_session_another_process_locked_meanwhile_is_lost_to_the_store_until_its_lock_is_released(
    store: PostgresStore, postgres_dsn: str, request: pytest.FixtureRequest
) -> None:
    lock = store.lock_session("s1")
    held = store.lock_session("s3")
    end_connections(postgres_dsn)
    other: PostgresStore = request.getfixturevalue("other")
    taken = other.lock_session("s1")  # the server dropped the first store's lock with its connection
    with pytest.raises(StoreUnavailable):
        store.sessions()
    with pytest.raises(SessionLost, match="another process took it"):
        store.apply("s1", said("late", 0))
    store.apply("s3", said("mine", 0))  # its lock was taken again
    with pytest.raises(SessionLocked):
        other.lock_session("s3")
    other.apply("s1", said("theirs", 0))
    lock.release()  # the runner that lost it ends: the store forgets the session
    with pytest.raises(SessionLocked):
        store.lock_session("s1")  # still the other process's
    taken.release()
    held.release()
    store.lock_session("s1").release()
    assert [r.body.count("theirs") for r in store.rows("s1")] == [1, 1]

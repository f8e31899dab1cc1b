"""PostgresStore after its connection broke: it connects again, and takes its session locks again.

The store's connection is ended from the server's side (``pg_terminate_backend``,
as a restart or a proxy would), on the throwaway server of ``tests/pg.py``. A
second store stands for another process sharing the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from orchestrator.messages import AssistantMessage, UserMessage
from orchestrator.store.errors import SessionLocked, SessionLost, StoreUnavailable
from orchestrator.store.interface import SessionChange
from tests.pg import end_connections

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

from orchestrator.store.postgres import PostgresStore  # noqa: E402


@pytest.fixture
def open_store(postgres_dsn: str) -> Iterator[Callable[[], PostgresStore]]:
    """Opens a store on the test's database (a second one stands for another process); all closed at the end."""
    opened: list[PostgresStore] = []

    def open_one() -> PostgresStore:
        opened.append(PostgresStore(postgres_dsn))
        return opened[-1]

    try:
        yield open_one
    finally:
        for made in opened:
            made.close()


def said(text: str, at: int) -> SessionChange:
    return SessionChange(append=((at, UserMessage(text)), (at + 1, AssistantMessage(f"re: {text}"))))


def test_the_call_a_broken_connection_fails_is_store_unavailable_and_the_next_goes_on_with_its_locks(
    open_store: Callable[[], PostgresStore], postgres_dsn: str
) -> None:
    store = open_store()
    lock = store.lock_session("s1")
    store.apply("s1", said("one", 0))
    assert end_connections(postgres_dsn) >= 1
    with pytest.raises(StoreUnavailable, match="connection was lost"):
        store.rows("s1")
    store.apply("s1", said("two", 2))  # connected again, its lock taken again
    assert [r.position for r in store.rows("s1")] == [0, 1, 2, 3]
    other = open_store()  # another process, connected after the cut
    with pytest.raises(SessionLocked):
        other.lock_session("s1")
    lock.release()
    other.lock_session("s1").release()


def test_a_session_another_process_locked_meanwhile_is_lost_to_the_store_until_its_lock_is_released(
    open_store: Callable[[], PostgresStore], postgres_dsn: str
) -> None:
    store = open_store()
    lock = store.lock_session("s1")
    held = store.lock_session("s3")
    end_connections(postgres_dsn)
    other = open_store()  # another process, connected after the cut
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

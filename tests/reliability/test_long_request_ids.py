"""A request id too long for a PostgreSQL notification's payload (8000 bytes) still runs: its commits and the posts to
its inbox are made, and they wake the store's feeds (told that anything may have changed).

Real pieces: a throwaway PostgreSQL (``tests/pg.py``) and the run store with its feed.
"""

from __future__ import annotations

import time

from orchestrator.store.changes import ChangeFeed, Changes
from orchestrator.store.runs import NewInboxItem, RunCommit, StoredEvent
from orchestrator.store.runs_sql import postgres_run_store

LONG_ID = "r" * 9000


def _told(feed: ChangeFeed) -> Changes:
    """The feed's next delivery that is not work alone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        changes = feed.wait(1)
        if changes.everything or any(topic != "work" for topic, _ in changes.keys):
            return changes
    raise AssertionError("the feed was told nothing within 10 s")


def test_a_run_whose_id_does_not_fit_in_a_payload_is_committed_answered_and_wakes_the_feeds(postgres_dsn: str) -> None:
    store = postgres_run_store(postgres_dsn)
    try:
        feed = store.watch()
        assert feed.wait(10).everything  # a new listener's first word
        store.create_run("s1", LONG_ID, {"role": "user", "content": "go"})
        [lease] = store.claim("w1", 60)
        store.commit(lease, RunCommit(events=(StoredEvent(LONG_ID, 1, "text_delta", {"delta": "x"}),), status="parked"))
        assert _told(feed).everything
        _, created = store.post(NewInboxItem("s1", LONG_ID, "ask_user_response", {"answer": "yes"}))
        assert created
        assert _told(feed).everything
        [record] = store.runs()
        assert (record.request_id == LONG_ID, record.status, record.last_seq) == (True, "queued", 1)
        assert [item.payload for item in store.inbox(LONG_ID)] == [{"answer": "yes"}]
    finally:
        store.close()

"""The PostgreSQL run store's change notifications: one per transaction, naming every run it changed.

Real pieces: a throwaway PostgreSQL (``tests/pg.py``), the run store, its feed (``watch``), and a listening
connection of the test's own that sees the notifications as any process of the cluster receives them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.store.change_notes import EVERYTHING, PAYLOAD_LIMIT, change_payloads, changed_keys
from orchestrator.store.changes import INBOX, RUN, WORK, ChangeFeed, Changes
from orchestrator.store.runs import Lease, NewInboxItem, RunCommit, StoredEvent
from orchestrator.store.runs_sql import (
    CHANGE_CHANNEL,
    PER_RUN_CHANNEL,
    WAKE_CHANNEL,
    SQLRunStore,
)

INPUT = {"role": "user", "content": "hello"}


class Heard:
    """A listening connection of its own on every channel of the store, as another process of the cluster."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.db = psycopg.connect(dsn, autocommit=True)
        for channel in (CHANGE_CHANNEL, WAKE_CHANNEL, PER_RUN_CHANNEL):
            self.db.execute(f"LISTEN {channel}")

    def until_quiet(self, quiet: float = 0.5) -> list[tuple[str, str]]:
        """The (channel, payload) of each notification received until none came for ``quiet`` seconds."""
        notes: list[tuple[str, str]] = []
        while True:
            got = [(note.channel, note.payload) for note in self.db.notifies(timeout=quiet)]
            if not got:
                return notes
            notes += got


@pytest.fixture
def heard(postgres_dsn: str) -> Iterator[Heard]:
    listening = Heard(postgres_dsn)
    try:
        yield listening
    finally:
        listening.db.close()


def _quiet_feed(store: SQLRunStore) -> ChangeFeed:
    """A feed of the store, once its listener told its first ``everything`` and what was sent before settled."""
    feed = store.watch()
    assert feed.wait(10).everything, "a new listener first tells everything"
    while feed.wait(0.5):
        pass
    return feed


def _next_runs(feed: ChangeFeed) -> Changes:
    """The feed's first delivery that names runs (work alone may come first)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        changes = feed.wait(1)
        if changes.everything or any(topic != WORK for topic, _ in changes.keys):
            return changes
    raise AssertionError("the feed was not told of the runs within 10 s")


def _held(store: SQLRunStore, request_ids: list[str]) -> list[Lease]:
    for index, request_id in enumerate(request_ids):
        store.create_run(f"s{index}", request_id, INPUT)
    leases = store.claim("w1", 60, limit=len(request_ids))
    assert len(leases) == len(request_ids)
    return sorted(leases, key=lambda lease: lease.request_id)


def _step(lease: Lease, status: str = "running", wake_at: float | None = None) -> RunCommit:
    event = StoredEvent(lease.request_id, 1, "text_delta", {"delta": "x"})
    return RunCommit(events=(event,), status=status, wake_at=wake_at)


def test_a_group_commit_sends_one_notification_naming_each_run_and_the_feed_is_told_of_them_at_once(
    pg_store: SQLRunStore, heard: Heard
) -> None:
    ids = [f"run-{index:02}" for index in range(40)]
    leases = _held(pg_store, ids)
    feed = _quiet_feed(pg_store)
    heard.until_quiet()
    stale = leases[7]
    pg_store.commit(stale, _step(stale))  # its lease moves on: its second commit in the group is fenced off
    assert _next_runs(feed).keys == {(RUN, stale.request_id)}
    heard.until_quiet()
    later = time.time() + 3600
    commits = [(one, _step(one, "completed" if index % 3 else "parked", later)) for index, one in enumerate(leases)]
    outcomes = pg_store.commit_many(commits)
    assert [type(outcome).__name__ for outcome in outcomes].count("LeaseLost") == 1
    committed = {(RUN, request_id) for request_id in ids if request_id != stale.request_id}
    notes = heard.until_quiet()
    # One notification names every run the transaction changed; work is woken once, on its own channel.
    assert [channel for channel, _ in notes if channel == CHANGE_CHANNEL] == [CHANGE_CHANNEL]
    assert [channel for channel, _ in notes if channel == WAKE_CHANNEL] == [WAKE_CHANNEL]
    assert [payload for channel, payload in notes if channel == PER_RUN_CHANNEL] == []
    [payload] = [payload for channel, payload in notes if channel == CHANGE_CHANNEL]
    assert changed_keys(payload) == committed
    # The store's feed is told of them all in one delivery.
    changes = _next_runs(feed)
    assert not changes.everything and changes.keys - {(WORK, "")} == committed


def test_runs_that_do_not_fit_in_one_payload_are_named_in_as_many_as_they_need(
    pg_store: SQLRunStore, heard: Heard
) -> None:
    ids = [f"{index:03}-{'long-request-id-' * 8}" for index in range(120)]  # about 16 KB of keys
    leases = _held(pg_store, ids)
    feed = _quiet_feed(pg_store)
    heard.until_quiet()
    pg_store.commit_many([(lease, _step(lease)) for lease in leases])
    payloads = [payload for channel, payload in heard.until_quiet() if channel == CHANGE_CHANNEL]
    assert 2 <= len(payloads) <= 3
    assert all(len(payload.encode()) < PAYLOAD_LIMIT for payload in payloads)
    named: set[tuple[str, str]] = set()
    for payload in payloads:
        keys = changed_keys(payload)
        assert keys is not None
        named |= keys
    assert named == {(RUN, request_id) for request_id in ids}
    told: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 10
    while told != named and time.monotonic() < deadline:
        told |= feed.wait(1).keys
    assert told == named


def test_a_post_names_its_runs_inbox_and_wakes_work_in_one_transaction(pg_store: SQLRunStore, heard: Heard) -> None:
    [lease] = _held(pg_store, ["asked"])
    pg_store.commit(lease, RunCommit(status="parked"))
    feed = _quiet_feed(pg_store)
    heard.until_quiet()
    pg_store.post(NewInboxItem("s0", "asked", "ask_user_response", {"answer": "yes"}))
    notes = heard.until_quiet()
    assert sorted(notes) == sorted([(CHANGE_CHANNEL, '{"inbox":["asked"]}'), (WAKE_CHANNEL, "")])
    assert _next_runs(feed).keys == {(INBOX, "asked"), (WORK, "")}


def test_a_post_to_a_run_being_carried_wakes_its_inbox_and_no_worker(pg_store: SQLRunStore, heard: Heard) -> None:
    _held(pg_store, ["held"])  # carried: its carrier reads its inbox; no worker has a claim to make
    feed = _quiet_feed(pg_store)
    heard.until_quiet()
    pg_store.post(NewInboxItem("s0", "held", "ask_user_response", {"answer": "yes"}))
    assert heard.until_quiet() == [(CHANGE_CHANNEL, '{"inbox":["held"]}')]
    assert _next_runs(feed).keys == {(INBOX, "held")}
    assert pg_store.run("held").status == "running"


def test_a_notification_of_an_earlier_version_still_wakes_the_feed_of_its_run(
    pg_store: SQLRunStore, postgres_dsn: str
) -> None:
    import psycopg

    feed = _quiet_feed(pg_store)
    with psycopg.connect(postgres_dsn, autocommit=True) as older, older.transaction():
        older.execute("SELECT pg_notify(%s, %s)", (PER_RUN_CHANNEL, "run:r1"))
        older.execute("SELECT pg_notify(%s, %s)", (PER_RUN_CHANNEL, "inbox:r:2"))
        older.execute(f"NOTIFY {WAKE_CHANNEL}")
    told: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 10
    expected = {(RUN, "r1"), (INBOX, "r:2"), (WORK, "")}
    while told != expected and time.monotonic() < deadline:
        told |= feed.wait(1).keys
    assert told == expected


@pytest.mark.parametrize(
    "request_ids",
    [
        ["plain"],
        ['quote"d', "back\\slash", "new\nline", "co:lon", "sp ace", "ünïcode-✓", ""],
        [f"r{index:04}" for index in range(2000)],
    ],
)
def test_payloads_name_every_key_back_and_each_fits(request_ids: list[str]) -> None:
    keys = {(topic, request_id) for request_id in request_ids for topic in (RUN, INBOX)}
    payloads = change_payloads(keys, limit=500)
    assert all(len(payload) <= 500 and payload.isascii() for payload in payloads)
    named: set[tuple[str, str]] = set()
    for payload in payloads:
        back = changed_keys(payload)
        assert back is not None
        named |= back
    assert named == keys


@pytest.mark.parametrize("payload", [EVERYTHING, "", "[]", '{"run": "r1"}', '{"run": [1]}', "run:r1"])
def test_a_payload_that_is_not_an_object_of_id_lists_means_everything(payload: Any) -> None:
    assert changed_keys(payload) is None


def test_a_key_too_long_for_a_payload_is_sent_as_everything() -> None:
    assert change_payloads({(RUN, "r1"), (RUN, "x" * 600)}, limit=500) == [EVERYTHING]
    assert change_payloads(set()) == []

"""``Wakeups`` is woken only by the changes its process waits for: a web node (which takes no mark and waits for no
work) is not woken by new runs and answers to runs it does not follow; a worker's marks keep every inbox's changes."""

from __future__ import annotations

from pathlib import Path

import trio

from orchestrator.cluster.wakeups import Wakeups
from orchestrator.store.changes import INBOX, RUN, WORK
from orchestrator.store.runs import NewInboxItem, RunCommit, StoredEvent
from orchestrator.store.runs_sql import SQLRunStore, sqlite_run_store

INPUT = {"role": "user", "content": "hi"}


def _parked(store: SQLRunStore, request_id: str) -> None:
    store.create_run(f"s-{request_id}", request_id, INPUT)
    [lease] = store.claim("w1", 30)
    store.commit(lease, RunCommit(status="parked"))


async def _ready(store: SQLRunStore) -> Wakeups:
    wakeups = Wakeups(store)
    with trio.fail_after(5):
        await wakeups.arm(WORK).wait()  # the feed's first reading: anything may have changed before it
    return wakeups


async def test_a_web_node_is_woken_only_by_the_runs_it_follows(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        _parked(store, "followed")
        _parked(store, "other")
        wakeups = await _ready(store)
        delivered = wakeups._delivered
        followed = wakeups.arm(RUN, "followed")
        await trio.to_thread.run_sync(store.create_run, "s-new", "new", INPUT)  # work
        await trio.to_thread.run_sync(store.post, NewInboxItem("s-other", "other", "ask_user_response", {"a": 1}))
        await trio.sleep(0.5)  # a delivery of them would have come by now
        assert wakeups._delivered == delivered and not followed.is_set()
        await trio.to_thread.run_sync(store.post, NewInboxItem("s-followed", "followed", "ask_user_response", {}))
        claimed = await trio.to_thread.run_sync(store.claim, "w2", 30, 5)
        [lease] = [one for one in claimed if one.request_id == "followed"]
        event = StoredEvent("followed", 1, "text_delta", {"delta": "x"})
        await trio.to_thread.run_sync(store.commit, lease, RunCommit(events=(event,)))
        with trio.fail_after(5):
            await followed.wait()
    finally:
        store.close()


async def test_once_a_mark_is_taken_every_inbox_change_is_kept_for_changed_since(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        _parked(store, "r1")
        wakeups = await _ready(store)
        mark = wakeups.mark()
        await trio.to_thread.run_sync(store.post, NewInboxItem("s-r1", "r1", "ask_user_response", {"a": 1}))
        with trio.fail_after(5):
            while not wakeups.changed_since(mark, INBOX, "r1"):
                await trio.sleep(0.05)
    finally:
        store.close()

"""``Wakeups.changed_since``: whether a run's inbox changed after a mark taken before a read of it (a claim reads
the inboxes of the runs it takes; a post told after the mark makes the carrier read again)."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from orchestrator.cluster.wakeups import RECENT_CHANGES, Wakeups
from orchestrator.store.changes import INBOX, WORK, Changes
from orchestrator.store.runs import NewInboxItem, RunCommit
from orchestrator.store.runs_sql import sqlite_run_store


async def test_a_post_told_after_the_mark_is_a_change_of_its_runs_inbox_only(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        for request_id in ("r1", "r2"):
            store.create_run(f"s-{request_id}", request_id, {"role": "user", "content": "hi"})
            [lease] = store.claim("w1", 30)
            store.commit(lease, RunCommit(status="parked"))
        wakeups = Wakeups(store)
        with trio.fail_after(5):
            await wakeups.arm(WORK).wait()  # the feed's first reading: anything may have changed before it
        mark = wakeups.mark()
        assert not wakeups.changed_since(mark, INBOX, "r1")
        posted = wakeups.arm(INBOX, "r1")
        await trio.to_thread.run_sync(store.post, NewInboxItem("s-r1", "r1", "ask_user_response", {"answer": "a"}))
        with trio.fail_after(5):
            await posted.wait()
        assert wakeups.changed_since(mark, INBOX, "r1")
        assert not wakeups.changed_since(mark, INBOX, "r2")
        assert not wakeups.changed_since(wakeups.mark(), INBOX, "r1")
        # Once more deliveries came than are kept, a mark from before them is answered yes for any run.
        feed = wakeups._feed
        assert feed is not None
        for _ in range(RECENT_CHANGES):
            wakeups._woken(feed, Changes(frozenset({(INBOX, "other")})))
        assert wakeups.changed_since(mark, INBOX, "r2")
    finally:
        store.close()


async def test_forget_lets_a_pair_go_only_once_nobody_waits_on_it(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        wakeups = Wakeups(store)
        event = wakeups.arm(INBOX, "r1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(event.wait)
            await trio.testing.wait_all_tasks_blocked()
            wakeups.forget(INBOX, "r1")  # a task waits on it: kept, and a change still wakes it
            assert wakeups.arm(INBOX, "r1") is event
            nursery.cancel_scope.cancel()
        wakeups.forget(INBOX, "r1")
        assert wakeups.arm(INBOX, "r1") is not event  # let go: the pair's next wait gets an event of its own
    finally:
        store.close()

"""A run store's feed hands its changes to a trio loop from the thread that committed them: a waiter is woken with
no thread of the loop's own reading the feed, and the feed is closed once the loop ends (so the store stops
watching), whether or not a change came after."""

from __future__ import annotations

import threading
from pathlib import Path

import trio

from orchestrator.cluster.wakeups import Wakeups
from orchestrator.store.changes import INBOX, WORK, ChangeFeed
from orchestrator.store.runs import NewInboxItem, RunCommit
from orchestrator.store.runs_sql import SQLRunStore, sqlite_run_store

INPUT = {"role": "user", "content": "hi"}


def _held(store: SQLRunStore, request_id: str) -> None:
    store.create_run(f"s-{request_id}", request_id, INPUT)
    [lease] = store.claim("w1", 30)
    store.commit(lease, RunCommit())


def _feed_threads() -> list[str]:
    """Threads running a job of the loop's wake-ups task now (trio names a thread after its job's task)."""
    return [thread.name for thread in threading.enumerate() if "wake-ups of" in thread.name]


async def test_a_post_committed_in_another_thread_wakes_the_waiter_of_the_runs_inbox(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        _held(store, "r1")
        wakeups = Wakeups(store)
        with trio.fail_after(5):
            await wakeups.arm(WORK).wait()  # the feed's first reading: anything may have changed before it
        inbox = wakeups.arm(INBOX, "r1")
        posted = threading.Thread(target=store.post, args=(NewInboxItem("s-r1", "r1", "ask_user_response", {"a": 1}),))
        posted.start()
        with trio.fail_after(5):
            await inbox.wait()
        posted.join()
        await trio.sleep(0.05)  # a reader of the feed in a thread would be waiting on it again by now
        assert _feed_threads() == []  # nothing of the loop waits on the feed in a thread
    finally:
        store.close()


def test_the_feed_is_closed_when_its_loop_ends(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    feeds: list[ChangeFeed] = []
    try:
        _held(store, "r1")

        async def wait_once() -> None:
            wakeups = Wakeups(store)
            with trio.fail_after(5):
                await wakeups.arm(WORK).wait()
            assert wakeups._feed is not None
            feeds.append(wakeups._feed)

        trio.run(wait_once)
        [feed] = feeds
        assert feed.closed
        store.post(NewInboxItem("s-r1", "r1", "ask_user_response", {"a": 1}))  # told to nobody: no loop to take it
        assert feed.closed
    finally:
        store.close()


async def test_changes_told_before_the_feed_could_push_do_not_stop_it_pushing(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        _held(store, "r1")
        watch = store.watch

        def watched() -> ChangeFeed:
            # The store's watching thread tells its first reading before the waits' side has set up the feed.
            feed = watch()
            feed.add(frozenset(), everything=True)
            return feed

        store.watch = watched  # type: ignore[method-assign]
        wakeups = Wakeups(store)
        with trio.fail_after(5):
            await wakeups.arm(WORK).wait()  # the store's own first reading, told after the early one
        inbox = wakeups.arm(INBOX, "r1")
        await trio.to_thread.run_sync(store.post, NewInboxItem("s-r1", "r1", "ask_user_response", {"a": 1}))
        with trio.fail_after(5):
            await inbox.wait()
    finally:
        store.close()

"""A commit by another process just after a process starts watching an SQLite run store wakes its waits.

The store's watching thread compares SQLite's ``data_version`` with its last reading. A commit
made between a wait's arming and that thread's first reading was in the baseline, so it woke
nobody, and a web node's follower of a run finished meanwhile waited a minute for its safety read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio

from orchestrator.cluster.wakeups import Wakeups
from orchestrator.store.changes import RUN
from orchestrator.store.runs_sql import sqlite_run_store


async def test_a_commit_right_after_the_first_wait_is_armed_wakes_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = sqlite_run_store(str(path))
    try:
        woken = Wakeups(store).arm(RUN, "r1")  # the store starts watching now
        other = sqlite3.connect(path)  # another process's connection, as far as data_version goes
        other.execute("CREATE TABLE another_process_was_here (x INTEGER)")
        other.commit()
        other.close()
        with trio.move_on_after(5):
            await woken.wait()
        assert woken.is_set(), "the commit made as the store started watching woke nobody"
    finally:
        store.close()


def test_a_store_nobody_watches_any_more_keeps_no_thread_reading_it(tmp_path: Path) -> None:
    """The watching thread ends once every feed is closed (the trio run whose wake-ups read it ended), and the
    next wait starts another: a process that opened many stores does not keep a thread polling each."""
    import threading
    import time

    store = sqlite_run_store(str(tmp_path / "runs.db"))
    name = f"watching {store.where}"

    async def wait_briefly() -> None:
        await Wakeups(store).wait(RUN, "r1", 0.05)
        assert any(thread.name == name for thread in threading.enumerate())  # watched while the run waits

    try:
        for _ in range(2):  # and once more: a later wait watches again
            trio.run(wait_briefly)
            deadline = time.monotonic() + 5
            while any(thread.name == name for thread in threading.enumerate()):
                assert time.monotonic() < deadline, "the store's watching thread outlived every feed"
                time.sleep(0.05)
    finally:
        store.close()

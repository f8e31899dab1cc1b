"""On Linux, the session locks of an SQLite file are byte ranges of one lock file, not a file per session.

Each session's lock was an ``flock`` on a file of its own in ``<path>.locks/``, made at the session's
first run and kept for ever: a new file (an inode to allocate, costly on a busy file system) for
each new session, and a directory that grew by one file per session ever run. A session's lock is
now an open file description lock on a range of one file; a refused process still learns the
holder's process id, and a killed holder still blocks nothing.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from orchestrator.store import SQLiteStore
from orchestrator.store.errors import SessionLocked
from orchestrator.store.runs_sql import sqlite_run_store

REPO = Path(__file__).resolve().parents[2]
HOLDER = textwrap.dedent(
    """
    import sys, time
    from orchestrator.store import SQLiteStore
    store = SQLiteStore(sys.argv[1])  # as ``chat`` on the file holds its session
    store.lock_session(sys.argv[2])
    print("HELD", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture(autouse=True)
def _linux_only() -> None:
    if not (sys.platform == "linux" and hasattr(fcntl, "F_OFD_SETLK")):
        pytest.skip("open file description locks are Linux's; elsewhere each session keeps a lock file of its own")


def test_many_sessions_carried_leave_one_lock_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = sqlite_run_store(str(path))
    try:
        for index in range(50):
            held = store.lock_session(f"s{index}")
            assert held is not None
            held.release()
        held_at_once = [store.lock_session(f"t{index}") for index in range(20)]
        assert sorted(os.listdir(f"{path}.locks")) == ["sessions.lock"]
        for held in held_at_once:
            assert held is not None
            held.release()
    finally:
        store.close()


def test_a_session_held_by_another_process_names_it_and_is_free_once_it_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    SQLiteStore(str(path)).close()
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, str(script), str(path), "s"], stdout=subprocess.PIPE, env=env, text=True)
    guard = threading.Timer(60, child.kill)
    guard.start()
    store = sqlite_run_store(str(path))
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "HELD"
        with pytest.raises(SessionLocked) as refused:
            store.lock_session("s")
        assert refused.value.holder == f"process {child.pid}"
        other = store.lock_session("t")  # only that session is held
        assert other is not None
        other.release()
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while True:
            try:
                held = store.lock_session("s")
                break
            except SessionLocked:
                assert time.monotonic() < deadline, "the killed process still holds the session"
                time.sleep(0.05)
        assert held is not None
        with pytest.raises(SessionLocked) as again:
            SQLiteStore(str(path)).lock_session("s")  # another store object of this process
        assert again.value.holder == f"process {os.getpid()}"
        held.release()
    finally:
        guard.cancel()
        child.kill()
        child.wait()
        store.close()

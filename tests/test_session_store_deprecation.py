"""Constructing a session store extension warns that it keeps sessions, not runs, naming the durable path;
the terminal's own session file does not."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from orchestrator.cli.session_file import TerminalSessionStore
from orchestrator.extensions.session_store import SessionStoreExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.store.memory import MemoryStore


def test_an_sqlite_session_store_warns_at_the_line_that_builds_it(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning) as caught:
        store = SQLiteSessionStore(tmp_path / "sessions.db")
    store.close()
    (warning,) = caught.list
    message = str(warning.message)
    assert message.startswith("SQLiteSessionStore keeps sessions, not runs:")
    assert "takes effect only at the session's next request" in message
    assert "orchestrator.cluster.open_durable_agent(agent, 'app.db')" in message
    assert warning.filename == __file__  # the caller's line, not the library's __init__


def test_the_extension_on_any_store_warns_under_its_own_name() -> None:
    with pytest.warns(DeprecationWarning, match=r"^SessionStoreExtension keeps sessions, not runs") as caught:
        SessionStoreExtension(MemoryStore())
    assert caught.list[0].filename == __file__


def test_the_terminals_session_file_does_not_warn(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = TerminalSessionStore(tmp_path / "sessions.db")
    store.close()


def test_the_sessions_command_says_nothing_of_it_even_with_warnings_as_errors(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    TerminalSessionStore(db).close()
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-m", "orchestrator", "sessions", "list", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "DeprecationWarning" not in done.stderr

"""A wait the session store recorded in a file (``chat`` stopped while it asked) is not lost when ``serve`` opens the
file with the run store: ``serve`` names its session at start, in one line, with the command that answers it, and
``chat --session ID`` does."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.messages import ToolMessage
from tests.cluster.processes import ROOT, Cluster

NAMED = (
    "serve: 1 session(s) wait for answers recorded by chat or an earlier serve (old): answer them with"
    " python -m orchestrator chat --session ID"
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(f"sqlite:///{tmp_path / 'agent.db'}", tmp_path, tmp_path / "marks") as running:
        yield running


def chat(cluster: Cluster) -> list[str]:
    db, root = cluster.sqlite_file, str(cluster.directory)
    return [sys.executable, "-m", "orchestrator", "chat", "--session", "old", "--db", db, "--root", root]


def test_serve_names_the_sessions_whose_waits_chat_recorded_and_chat_answers_them(cluster: Cluster) -> None:
    out = cluster.directory / "chat.out"
    with out.open("w") as sink:
        asking = subprocess.Popen(
            chat(cluster), cwd=ROOT, stdin=subprocess.PIPE, stdout=sink, stderr=subprocess.STDOUT, text=True
        )
    try:
        assert asking.stdin is not None
        asking.stdin.write("ask me\n")
        asking.stdin.flush()
        deadline = time.monotonic() + 30
        while "? Which database should I use?" not in out.read_text():
            assert asking.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
    finally:
        asking.kill()  # kill -9 while the question waits: the session store keeps the wait
        asking.wait()

    first = cluster.serve_default("first")
    assert NAMED in first.output(), first.output()
    session = httpx.get(f"{first.url}/sessions/old", timeout=10).json()
    assert [m["role"] for m in session["messages"]] == ["user", "assistant"]  # the question's call, unanswered
    first.process.terminate()
    first.process.wait(10)

    answered = subprocess.run(chat(cluster), input="1\nthanks\n", cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "(the previous run stopped while waiting for ask_user" in answered.stdout, answered.stdout + answered.stderr
    store = SQLiteSessionStore(cluster.sqlite_file)
    try:
        results = [m for m in store.messages("old") if isinstance(m, ToolMessage) and m.name == "ask_user"]
        assert [m.text for m in results] == ["sqlite"] and store.pending_approvals() == []
    finally:
        store.close()

    second = cluster.serve_default("second")
    assert "wait for answers recorded by chat" not in second.output(), second.output()

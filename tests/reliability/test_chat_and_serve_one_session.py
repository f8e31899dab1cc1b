"""The CLI (session store) and ``serve`` (run store, carried in the process) on one SQLite file run a session one at a
time: a run ``serve`` is to carry while the CLI runs its session waits (given back, never failed) and goes on once
the CLI is done; the CLI refuses a session while the run store has a run of it that has not ended (a parked one too).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.cluster.processes import ROOT, Cluster
from tests.server.support import read_sse


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(f"sqlite:///{tmp_path / 'agent.db'}", tmp_path, tmp_path / "marks") as running:
        yield running


def cli(cluster: Cluster, command: str, *args: str) -> list[str]:
    """``python -m orchestrator COMMAND ... --session s1`` on the cluster's file (the CLI's own scripted model)."""
    return [
        sys.executable, "-m", "orchestrator", command, *args,
        "--session", "s1", "--db", cluster.sqlite_file, "--root", str(cluster.directory), "--yes",
    ]  # fmt: skip


def users(session: dict[str, object]) -> list[object]:
    messages = session["messages"]
    assert isinstance(messages, list)
    return [m["content"] for m in messages if m["role"] == "user"]


async def test_a_run_serve_would_carry_while_the_cli_runs_its_session_waits_then_goes_on(cluster: Cluster) -> None:
    served = cluster.serve_default("serve")
    out = cluster.directory / "cli.out"
    with out.open("w") as sink:
        running = subprocess.Popen(
            cli(cluster, "run", "slow work", "--scripted-delay", "3"), cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while "-> slow_step(" not in out.read_text():  # the CLI holds the session, in its tool call
            assert running.poll() is None and time.monotonic() < deadline, out.read_text()
            await trio.sleep(0.05)
        async with httpx.AsyncClient(timeout=10) as http:
            started = await http.post(f"{served.url}/sessions/s1/runs", json={"input": "tidy the notes"})
            assert started.status_code == 202, started.text
            request_id = started.json()["request_id"]
            await trio.sleep(1.5)  # claimed, found held by the CLI, given back (more than once)
            assert running.poll() is None, out.read_text()  # the CLI still runs the session
            meanwhile = (await http.get(f"{served.url}/sessions/s1")).json()
            assert users(meanwhile) == ["slow work"], meanwhile
            waiting = (await http.get(f"{served.url}/runs/{request_id}")).json()
            assert waiting["done"] is False, waiting
            assert running.wait(30) == 0, out.read_text()
            with trio.fail_after(30):
                parked = await read_sse(
                    http, f"{served.url}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked"
                )
            session = (await http.get(f"{served.url}/sessions/s1")).json()
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert parked.types[-1] == "run_parked", parked.types
    assert "run_failed" not in parked.types
    assert "Finished (slow work: done after 3 s)." in out.read_text()
    roles = [(m["role"], m["content"]) for m in session["messages"]]
    assert roles[0] == ("user", "slow work") and roles[3] == ("assistant", "Finished (slow work: done after 3 s).")
    assert roles[4] == ("user", "tidy the notes"), roles  # the CLI's turn whole, then serve's


async def test_the_cli_refuses_a_session_whose_run_is_parked_in_the_run_store_of_the_file(cluster: Cluster) -> None:
    served = cluster.serve_default("serve")
    async with httpx.AsyncClient(timeout=10) as http:
        started = await http.post(f"{served.url}/sessions/s1/runs", json={"input": "tidy the notes"})
        request_id = started.json()["request_id"]
        with trio.fail_after(30):
            await read_sse(http, f"{served.url}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked")
        reason = f"session 's1' has run '{request_id}' parked in the run store of {cluster.sqlite_file}"

        one_shot = subprocess.run(cli(cluster, "run", "hello"), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert one_shot.returncode == 1, one_shot.stdout + one_shot.stderr
        assert reason in one_shot.stdout + one_shot.stderr

        chat = subprocess.run(
            cli(cluster, "chat"), input="hello\n", cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert reason in chat.stdout + chat.stderr, chat.stdout + chat.stderr

        session = (await http.get(f"{served.url}/sessions/s1")).json()
    assert users(session) == ["tidy the notes"]  # nothing of the refused requests was stored
    assert session["request_id"] == request_id and session["pending"][0]["event"] == "enter_plan_mode"

"""A run's usage limits and deadline set from outside the process: the HTTP run body and the CLI flags.

Over HTTP (one process, and a web node whose worker carries the run), a run started with
``"limits"`` ends with the typed terminal event in its stream when a limit is reached, and one
started with a ``"deadline"`` when it runs past it; a bad value is a 400 saying what is wrong.
On the command line, ``--max-requests`` and ``--deadline`` end the run with the reason (exit 1),
and a bad value exits 2 with one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.store.runs_sql import sqlite_run_store
from tests.server.support import read_sse, serving
from tests.support import asks, call

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


@tool
async def wait_a_while(seconds: float) -> str:
    """Waits.

    Args:
        seconds: how long
    """
    await trio.sleep(seconds)
    return "waited"


async def _looping_client() -> Any:
    """Asks for a tool call every turn, forever: only a bound ends its run."""
    return await create_agent(
        ScriptedModel([asks(call("c", "wait_a_while", seconds=0.0))], repeat_last=True), tools=[wait_a_while]
    )


async def _run(http: httpx.AsyncClient, base: str, session_id: str, **bounds: Any) -> dict[str, Any]:
    started = await http.post(f"{base}/sessions/{session_id}/runs", json={"input": "go", **bounds})
    assert started.status_code == 202, started.text
    got = await read_sse(http, f"{base}/runs/{started.json()['request_id']}/events")
    assert got.types[-1] == "run_failed", got.types[-5:]
    return got.events[-1]


async def test_a_run_started_over_http_with_limits_or_a_deadline_ends_with_the_typed_event(
    http: httpx.AsyncClient,
) -> None:
    client = await create_agent(
        ScriptedModel([asks(call("c", "wait_a_while", seconds=30.0)), AssistantMessage("done")]),
        tools=[wait_a_while],
    )
    looping = await _looping_client()
    with trio.fail_after(30):
        async with serving(looping) as base:
            failed = await _run(http, base, "s1", limits={"requests": 3})
            assert failed["error"]["type"] == "UsageLimitExceeded", failed
            assert "requests=3" in failed["error"]["message"]
            failed = await _run(http, base, "s2", limits={"tool_calls": 2, "on_exhausted": "fail"})
            assert "tool_calls=2" in failed["error"]["message"], failed
        async with serving(client) as base:
            failed = await _run(http, base, "s3", deadline=0.3)
            assert failed["error"]["type"] == "RequestDeadlineExceeded", failed
            assert "deadline of 0.3 s" in failed["error"]["message"]


@pytest.mark.parametrize(
    ("bounds", "reason"),
    [
        ({"limits": {"requests": -1}}, "UsageLimits.requests must be at least 0, got -1"),
        ({"limits": {"requests": "3"}}, "UsageLimits.requests must be an int or None, got str"),
        ({"limits": {"request": 3}}, "unknown usage limits ['request']"),
        ({"limits": {"on_exhausted": "stop"}}, "UsageLimits.on_exhausted must be 'fail' or 'wrap_up', got 'stop'"),
        ({"limits": [3]}, "usage limits must be an object, got list"),
        ({"deadline": 0}, "'deadline' (seconds) must be more than 0, got 0"),
        ({"deadline": "soon"}, "'deadline' (seconds) must be a number"),
        ({"deadline": True}, "'deadline' (seconds) must be a number"),
    ],
)
async def test_a_bad_limit_or_deadline_is_a_400_with_the_reason(
    http: httpx.AsyncClient, bounds: dict[str, Any], reason: str
) -> None:
    with trio.fail_after(20):
        async with serving(await _looping_client()) as base:
            refused = await http.post(f"{base}/sessions/s1/runs", json={"input": "go", **bounds})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["type"] == "BadRequest" and reason in error["message"], error


async def test_a_web_node_hands_a_runs_limits_to_the_worker_that_carries_it(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    path = str(tmp_path / "runs.db")
    worker = Worker(await _looping_client(), sqlite_run_store(path), name="w", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            async with serving(StoreBackend(sqlite_run_store(path), poll_seconds=0.02)) as base:  # type: ignore[arg-type]
                failed = await _run(http, base, "s1", limits={"tool_calls": 2})
                bad = await http.post(f"{base}/sessions/s2/runs", json={"input": "go", "deadline": -1})
            nursery.cancel_scope.cancel()
    assert failed["error"]["type"] == "UsageLimitExceeded" and "tool_calls=2" in failed["error"]["message"], failed
    assert bad.status_code == 400 and "'deadline' (seconds) must be more than 0" in bad.text, bad.text


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "XDG_DATA_HOME": str(tmp_path / "data")}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", *args, "--db", str(tmp_path / "s.db"), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=60,
    )


def test_cli_flags_bound_a_run_and_end_it_with_the_reason(tmp_path: Path) -> None:
    limited = _cli(tmp_path, "hello", "--max-requests", "0")
    assert limited.returncode == 1, limited.stderr
    assert "* error: the request reached its usage limit requests=0" in limited.stdout
    late = _cli(tmp_path, "slow work", "--deadline", "0.5", "--scripted-delay", "30", "--yes")
    assert late.returncode == 1, late.stderr
    assert "* error: the request ran past its deadline of 0.5 s" in late.stdout


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (("--max-requests", "-1"), "--max-requests must not be negative, got -1"),
        (("--max-tool-calls", "x"), "argument --max-tool-calls: invalid int value: 'x'"),
        (("--max-tokens", "-5"), "--max-tokens must not be negative, got -5"),
        (("--deadline", "0"), "--deadline must be a number of seconds above 0, got 0"),
        (("--deadline", "inf"), "--deadline must be a number of seconds above 0, got inf"),
    ],
)
def test_a_bad_bound_on_the_command_line_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], reason: str
) -> None:
    from orchestrator.cli import main

    assert main(["hello", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and reason in err, err


async def test_a_parked_run_resumed_by_a_worker_counts_what_it_spent_before(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """Limits hold across a park: the model call made before the run parked counts after its resume."""

    def step(request: ModelRequest) -> AssistantMessage:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return asks(call("q1", "ask_user", question="Go on?", options=["yes", "no"]))
        return asks(call(f"c{len(request.messages)}", "wait_a_while", seconds=0.0))

    client = await create_agent(
        ScriptedModel([step], repeat_last=True), tools=[wait_a_while], extensions=[AskUserExtension()]
    )
    path = str(tmp_path / "runs.db")
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.05)

    async def answer(event: dict[str, Any]) -> None:
        if event["type"] == "run_parked":
            payload = {"tool_call_id": "q1", "answer": "yes"}
            body = {"name": "ask_user_response", "payload": payload}
            answered = await http.post(f"{base}/sessions/s1/events", json=body)
            assert answered.status_code == 202, answered.text

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            async with serving(StoreBackend(sqlite_run_store(path), poll_seconds=0.02)) as base:  # type: ignore[arg-type]
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "go", "limits": {"requests": 2}})
                assert started.status_code == 202, started.text
                got = await read_sse(http, f"{base}/runs/{started.json()['request_id']}/events", on_event=answer)
                session = (await http.get(f"{base}/sessions/s1")).json()
            nursery.cancel_scope.cancel()
    assert "run_parked" in got.types and got.types[-1] == "run_failed", got.types
    assert got.events[-1]["error"]["type"] == "UsageLimitExceeded", got.events[-1]
    responses = [m for m in session["messages"] if m["role"] == "assistant"]
    assert len(responses) == 2, f"{len(responses)} model calls made under a limit of 2"


async def test_a_parked_run_resumed_by_a_worker_keeps_the_running_time_its_deadline_had_left(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """The deadline counts the time a request runs, across a park: 0.6 s before it and 0.6 s after it pass a
    deadline of 1 s, although neither segment does alone (and the time it waited parked does not count)."""

    async def step(request: ModelRequest) -> AssistantMessage:
        await trio.sleep(0.6)
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return asks(call("q1", "ask_user", question="Go on?", options=["yes", "no"]))
        return AssistantMessage("done")

    client = await create_agent(ScriptedModel([step], repeat_last=True), extensions=[AskUserExtension()])
    path = str(tmp_path / "runs.db")
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.05)

    async def answer(event: dict[str, Any]) -> None:
        if event["type"] == "run_parked":
            await trio.sleep(1.5)  # waiting for people: not running time
            body = {"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "yes"}}
            answered = await http.post(f"{base}/sessions/s1/events", json=body)
            assert answered.status_code == 202, answered.text

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            async with serving(StoreBackend(sqlite_run_store(path), poll_seconds=0.02)) as base:  # type: ignore[arg-type]
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "go", "deadline": 1.0})
                assert started.status_code == 202, started.text
                got = await read_sse(http, f"{base}/runs/{started.json()['request_id']}/events", on_event=answer)
            nursery.cancel_scope.cancel()
    assert "run_parked" in got.types and "run_resumed" in got.types, got.types
    assert got.types[-1] == "run_failed", got.types
    assert got.events[-1]["error"]["type"] == "RequestDeadlineExceeded", got.events[-1]

"""Defects of today's run store that the durable store's design removes (docs/design/durable-store.md).

Each test reproduces one defect against the real store (SQLite in process; PostgreSQL with worker
processes for the crash) and asserts the behaviour the design promises. They are strict expected
failures: the fix that lands makes one pass, which fails the suite until its mark is removed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import AgentRunConfig, AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent
from orchestrator.cluster import Worker
from orchestrator.cluster.checkpoint import Checkpoint
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.messages import UserMessage
from orchestrator.store import runs_sql
from orchestrator.store.runs import NewInboxItem, RunCommit
from orchestrator.store.runs_sql import sqlite_run_store
from tests.cluster.processes import Cluster
from tests.reliability import durable_apps
from tests.support import asks, call

DESIGN = "the durable store (docs/design/durable-store.md) is not built yet"


def _ask_then_answer(request: ModelRequest) -> AssistantMessage:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"]))
    return AssistantMessage("Painted.")


async def _asking_client() -> Any:
    return await create_agent(ScriptedModel([_ask_then_answer], repeat_last=True), extensions=[AskUserExtension()])


async def _wait_for_status(store: Any, request_id: str, status: str) -> None:
    with trio.fail_after(20):
        while (record := store.run(request_id)) is None or record.status != status:
            await trio.sleep(0.02)


async def test_a_run_given_back_unrun_keeps_its_checkpoint(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    store.create_run("s1", "r1", {"role": "user", "content": "plan the move"})
    (dead,) = store.claim("dead", 0.05)
    planning = Checkpoint({"phase": "awaiting_model", "mode": "planning"}, 2, True, (), (), "planning")
    store.commit(dead, RunCommit(messages=(UserMessage("plan the move"),), checkpoint=planning.json()))
    committed = store.run("r1")
    assert committed is not None
    await trio.sleep(0.1)  # the lease runs out: its worker is gone

    client = await _asking_client()
    # The worker's own agent already runs session s1 (an in-process request waiting for its answer).
    busy = await client.start("something else", config=AgentRunConfig(session_id="s1", request_id="local"))
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.02)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            # The worker claims it (the version moves on), finds the session busy, and gives it back (again).
            while (record := store.run("r1")) is not None and record.version < committed.version + 2:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    busy.cancel()
    record = store.run("r1")
    assert record is not None and record.checkpoint is not None
    assert record.checkpoint["plan_mode"] == "planning"
    assert record.checkpoint["states"] == {"phase": "awaiting_model", "mode": "planning"}
    assert record.checkpoint["iterations"] == 2


async def test_a_run_its_carrier_cannot_run_is_not_claimed_again_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    store.create_run("s1", "r1", {"role": "user", "content": "paint it"})
    client = await _asking_client()
    busy = await client.start("something else", config=AgentRunConfig(session_id="s1", request_id="local"))
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.02)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await trio.sleep(1.0)
            nursery.cancel_scope.cancel()
    busy.cancel()
    record = store.run("r1")
    assert record is not None
    # Each claim and give-back moves the version by one each: a back-off allows a handful a second.
    assert record.version <= 6, f"claimed and given back {record.version // 2} times in one second"


async def test_cancelling_a_parked_run_gives_its_open_call_a_result(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    store.create_run("s1", "r1", {"role": "user", "content": "paint it"})
    worker = Worker(await _asking_client(), sqlite_run_store(path), name="w", poll_seconds=0.02)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await _wait_for_status(store, "r1", "parked")
            nursery.cancel_scope.cancel()
    view, changed = await StoreBackend(store).cancel("r1")  # type: ignore[arg-type]
    assert changed and view.done
    history = store.history("s1")
    calls = [c.id for m in history if isinstance(m, AssistantMessage) for c in m.tool_calls]
    results = [m.tool_call_id for m in history if isinstance(m, ToolMessage)]
    assert calls == ["q1"]
    assert results == calls, "the session keeps a tool call without a result; a strict provider refuses it"


def test_one_idempotency_key_answers_runs_of_two_sessions(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    store.create_run("s1", "r1", {"role": "user", "content": "one"})
    store.create_run("s2", "r2", {"role": "user", "content": "two"})
    key = "ask_user_response:call_0:yes"  # what two consoles send for the same call id and answer
    first, added_first = store.post(NewInboxItem("s1", "r1", "ask_user_response", {"tool_call_id": "call_0"}, key))
    second, added_second = store.post(NewInboxItem("s2", "r2", "ask_user_response", {"tool_call_id": "call_0"}, key))
    assert added_first and first.request_id == "r1"
    assert added_second and second.request_id == "r2", "the second session's answer was dropped"
    assert [item.request_id for item in store.inbox("r2")] == ["r2"]


def test_a_worker_whose_clock_runs_ahead_takes_no_live_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "runs.db")
    live, ahead = sqlite_run_store(path), sqlite_run_store(path)
    live.create_run("s1", "r1", {"role": "user", "content": "hi"})
    (held,) = live.claim("live", 15.0)
    real_time = time.time
    monkeypatch.setattr(runs_sql.time, "time", lambda: real_time() + 60.0)  # this process's clock, 60 s ahead
    taken = ahead.claim("ahead", 15.0)
    assert taken == [], f"a live lease ({held.owner}, renewed moments ago) was taken over"


# -- a crash between an approval and the end of its call, with worker processes on PostgreSQL -------


@pytest.fixture
def cluster(postgres_dsn: str, tmp_path: Path) -> Any:
    with Cluster(postgres_dsn, tmp_path, tmp_path / "marks") as running:
        yield running


async def test_an_approved_call_runs_at_most_once_when_its_worker_is_killed_mid_call(cluster: Cluster) -> None:
    app = "tests.reliability.durable_apps:charge_agent"
    ledger = cluster.marks / durable_apps.LEDGER.name
    web = cluster.web("web")
    first = cluster.worker("a", app=app, lease_seconds=2.0)
    answered: set[int] = set()  # the run versions whose park was answered

    async with httpx.AsyncClient(timeout=10) as http:
        started = await http.post(f"{web.url}/sessions/s1/runs", json={"input": "slow order-1"})
        assert started.status_code == 202, started.text
        request_id = started.json()["request_id"]

        async def approve_if_parked() -> str:
            ((status, version),) = cluster.query(
                "SELECT status, version FROM orchestrator_runs WHERE request_id = %s", request_id
            )
            if status == "parked" and version not in answered:
                answered.add(int(version))  # type: ignore[arg-type]
                reply = await http.post(
                    f"{web.url}/sessions/s1/events",
                    json={"name": "tool_approval_response", "payload": {"tool_call_id": "c1", "approved": True}},
                )
                assert reply.status_code == 202, reply.text
            return str(status)

        try:
            with trio.fail_after(60):
                while not (ledger.exists() and ledger.read_text().strip()):
                    await approve_if_parked()
                    await trio.sleep(0.05)
                first.kill()  # the charge was made; its worker dies before the result is recorded
                cluster.worker("b", app=app, lease_seconds=2.0)
                while await approve_if_parked() != "completed":
                    await trio.sleep(0.05)
        except BaseException:
            print(cluster.logs())
            raise
        session = (await http.get(f"{web.url}/sessions/s1")).json()
    assert ledger.read_text().splitlines() == ["slow order-1"], "the approved charge ran more than once"
    results = [m["content"] for m in session["messages"] if m["role"] == "tool"]
    assert len(results) == 1 and "may or may not have taken effect" in str(results[0]), results

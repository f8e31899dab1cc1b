"""A wait's expiry stored with the run: it fires on whichever worker holds the run, after any restart.

Worker and web node processes on one run store (SQLite, then PostgreSQL): a run parks on an
approval that expires, its worker stops (SIGTERM on SQLite, ``kill -9`` on PostgreSQL), the
expiry passes while no process holds the run, an answer sent then is refused over HTTP with a
409 saying it expired, and a worker started afterwards resumes the run, which declines the
call (the ``charge`` tool's ledger of real executions stays empty), streams ``wait_expired``
once and completes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent
from orchestrator.cluster import Worker
from orchestrator.cluster.checkpoint import read
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.messages import ToolCall
from orchestrator.store.runs_sql import open_run_store, sqlite_run_store
from tests.cluster.processes import Cluster, Node
from tests.reliability import durable_apps
from tests.server.support import read_sse
from tests.support import asks, call

APP = "tests.reliability.durable_apps:expiring_charge_agent"


async def _expires_while_nobody_holds_the_run(cluster: Cluster, stop: Callable[[Node], None]) -> None:
    ledger = cluster.marks / durable_apps.LEDGER.name
    store = open_run_store(cluster.dsn)
    web = cluster.web("web")
    first = cluster.worker("a", app=APP, lease_seconds=2.0)
    async with httpx.AsyncClient(timeout=10) as http:
        try:
            with trio.fail_after(60):
                started = await http.post(f"{web.url}/sessions/s1/runs", json={"input": "order-1"})
                assert started.status_code == 202, started.text
                request_id = started.json()["request_id"]
                while (record := store.run(request_id)) is None or record.status != "parked":
                    await trio.sleep(0.05)
                checkpoint = read(record.checkpoint)
                assert checkpoint is not None
                (waiting,) = checkpoint.waiting
                assert waiting.expires_at is not None, "the wait's expiry is not in the checkpoint"
                assert checkpoint.wake_at() == waiting.expires_at
                stop(first)
                assert store.next_wake() is not None, "the parked run's wake_at is not stored"
                await trio.sleep(max(0.0, waiting.expires_at - time.time()) + 0.5)
                status = store.run(request_id)
                assert status is not None and status.status == "parked"  # nobody held it: nothing fired yet

                pending = (await http.get(f"{web.url}/sessions/s1")).json()["pending"]
                assert pending == [], "an expired wait is still listed as answerable"
                late = await http.post(
                    f"{web.url}/sessions/s1/events",
                    json={"name": "tool_approval_response", "payload": {"tool_call_id": "c1", "approved": True}},
                )
                assert late.status_code == 409, late.text
                assert late.json()["error"]["type"] == "EventRefused"
                assert "expired: nobody answered it by" in late.json()["error"]["message"], late.text

                cluster.worker("b", app=APP, lease_seconds=2.0)
                got = await read_sse(http, f"{web.url}/runs/{request_id}/events")
                session = (await http.get(f"{web.url}/sessions/s1")).json()
                again = await http.post(
                    f"{web.url}/sessions/s1/events",
                    json={"name": "tool_approval_response", "payload": {"tool_call_id": "c1", "approved": True}},
                )
        except BaseException:
            print(cluster.logs() if cluster.dsn.startswith("postgresql") else [n.output() for n in cluster.nodes])
            raise
        finally:
            store.close()
    expired = [e for e in got.events if e["type"] == "wait_expired"]
    assert len(expired) == 1, got.types
    assert expired[0]["tool_call_id"] == "c1" and expired[0]["outcome"] == "declined"
    assert expired[0]["expires_at"] == waiting.expires_at, "the resumed wait did not keep its stored deadline"
    assert got.types[-1] == "run_completed", got.types
    seqs = [e["seq"] for e in got.events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert not ledger.exists() or ledger.read_text() == "", "the expired (declined) charge ran"
    results = [m["content"] for m in session["messages"] if m["role"] == "tool"]
    assert len(results) == 1 and "expired" in str(results[0]), results
    assert again.status_code == 409, again.text  # the run has ended: still no answer taken


def _terminate(node: Node) -> None:
    node.process.terminate()
    node.process.wait(30)


async def test_an_approval_expires_while_no_process_holds_its_run_on_sqlite(tmp_path: Path) -> None:
    with Cluster(f"sqlite:///{tmp_path / 'runs.db'}", tmp_path, tmp_path / "marks") as cluster:
        await _expires_while_nobody_holds_the_run(cluster, _terminate)


async def test_an_approval_expires_after_its_worker_is_killed_on_postgresql(postgres_dsn: str, tmp_path: Path) -> None:
    with Cluster(postgres_dsn, tmp_path, tmp_path / "marks") as cluster:
        await _expires_while_nobody_holds_the_run(cluster, Node.kill)




def _asking(tmp_path: Path) -> tuple[ToolCall, AgentExtension]:
    return call("q1", "ask_user", question="Go on?", options=["yes", "no"]), AskUserExtension(expires_after=3.0)


def _proposing(tmp_path: Path) -> tuple[ToolCall, AgentExtension]:
    return call("p1", "enter_plan_mode", reason="risky"), PlanModeExtension(root=tmp_path, expires_after=3.0)


@pytest.mark.parametrize(
    ("wait", "outcome", "result"),
    [(_asking, "unanswered", "nobody answered the question"), (_proposing, "declined", "the proposal expired")],
    ids=["ask_user", "plan_mode"],
)
async def test_a_worker_takes_up_a_parked_run_at_its_wake_at_not_at_its_next_poll(
    tmp_path: Path, wait: Callable[[Path], tuple[ToolCall, AgentExtension]], outcome: str, result: str
) -> None:
    """One worker whose poll is a minute long: the expiry of its parked run's wait wakes it (its one timer on the
    store's earliest ``wake_at``), and the resumed wait takes its default: a question fails with "nobody
    answered", a Plan Mode proposal is declined."""
    asked, extension = wait(tmp_path)

    def step(request: ModelRequest) -> AssistantMessage:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        return AssistantMessage(f"Answer: {results[-1].content}") if results else asks(asked)

    client = await create_agent(ScriptedModel([step], repeat_last=True), extensions=[extension])
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    worker = Worker(client, store, name="w", poll_seconds=60.0)
    store.create_run("s1", "r1", {"role": "user", "content": "work"})
    with trio.fail_after(30):  # not the minute a poll would take
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while (record := store.run("r1")) is None or record.status != "parked":
                await trio.sleep(0.05)
            while not (record := store.run("r1")) or not record.final:
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    stored = store.events("r1")
    assert record.status == "completed", [e.type for e in stored]
    (expired,) = [e.body for e in stored if e.type == "wait_expired"]
    assert expired["outcome"] == outcome and expired["tool_call_id"] == asked.id
    (settled,) = [m for m in store.history("s1") if isinstance(m, ToolMessage)]
    assert result in str(settled.content), settled
    if isinstance(extension, PlanModeExtension):
        assert extension.mode("s1") == "normal"
    store.close()

"""uvicorn web nodes that carry runs themselves (``ORCHESTRATOR_APP``), with no worker process on the store.

Each uvicorn process serves the store's runs and carries them under leases: runs started, streamed
and answered through any of them complete, on SQLite and on PostgreSQL. SIGTERM to the uvicorn (of
two) that holds a run in the middle of a call lets the call finish, hands the run back at its last
commit with its lease ended, and the other uvicorn resumes it at once; the ``record`` tool's ledger shows the call
ran once. Without a lifespan (``--lifespan off``) the first request starts the carrier.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
from pathlib import Path

import httpx
import pytest
import trio

from tests.cluster.answers import parked_then_answered
from tests.cluster.processes import APP, Cluster, Node
from tests.cluster.test_uvicorn_web_nodes import drive
from tests.cluster.waits import until


def query(cluster: Cluster, sql: str, *params: object) -> list[tuple[object, ...]]:
    """``sql`` (``%s`` placeholders) on the cluster's store, SQLite or PostgreSQL."""
    if cluster.dsn.startswith("sqlite:///"):
        with sqlite3.connect(cluster.dsn.removeprefix("sqlite:///")) as db:
            return db.execute(sql.replace("%s", "?"), params).fetchall()
    return cluster.query(sql, *params)


def carrier_pids(cluster: Cluster) -> set[int]:
    """The processes that carried a part of some run: the pid in each ``run_resumed`` event's worker name."""
    rows = query(cluster, "SELECT body FROM orchestrator_run_events WHERE type = 'run_resumed'")
    return {int(json.loads(str(body))["worker"].split(":")[-2]) for (body,) in rows}


async def test_two_uvicorn_processes_carry_runs_on_sqlite_with_no_worker(sqlite_cluster: Cluster) -> None:
    try:
        web = sqlite_cluster.uvicorn_web("web", workers=2, app=APP)
        await drive(sqlite_cluster, [web.url], seed=3)
        carriers = carrier_pids(sqlite_cluster)
        assert carriers and carriers <= server_pids(web), (carriers, server_pids(web))  # not their parent
    except BaseException:
        print(sqlite_cluster.logs())
        raise


async def test_two_uvicorn_processes_carry_runs_on_postgresql_with_no_worker(postgres_cluster: Cluster) -> None:
    try:
        web = postgres_cluster.uvicorn_web("web", workers=2, app=APP)
        await drive(postgres_cluster, [web.url], seed=4)
        carriers = carrier_pids(postgres_cluster)
        assert carriers and carriers <= server_pids(web), (carriers, server_pids(web))
    except BaseException:
        print(postgres_cluster.logs())
        raise


def server_pids(node: Node) -> set[int]:
    """The pids of the processes that serve ``node`` (uvicorn's server processes, each with a carrier)."""
    return {int(pid) for pid in re.findall(r"Started server process \[(\d+)\]", node.output())}


async def start_slow_run(cluster: Cluster, nodes: list[Node], session_id: str) -> tuple[Node, Node]:
    """A run whose ``record`` call holds 3 s, entered by one of the two nodes: (the one holding it, the other)."""
    async with httpx.AsyncClient(timeout=30) as http:
        started = await http.post(f"{nodes[0].url}/sessions/{session_id}/runs", json={"input": "slow job"})
        assert started.status_code == 202, started.text
    until("the record call entered", lambda: cluster.records() == ["slow job"])
    ((owner,),) = query(cluster, "SELECT lease_owner FROM orchestrator_runs WHERE session_id = %s", session_id)
    holder = next(node for node in nodes if int(str(owner).split(":")[-2]) in server_pids(node))
    return holder, next(node for node in nodes if node is not holder)


async def resumed_and_finished(cluster: Cluster, leaving: Node, staying: Node, session_id: str) -> None:
    """SIGTERM to ``leaving``: it exits once its run is handed back, ``staying`` resumes the run at once and it
    completes once answered; the call running at the signal ran once, in ``leaving``."""
    leaving.process.send_signal(signal.SIGTERM)
    assert leaving.process.wait(30) in (0, -signal.SIGTERM), leaving.output()
    ((request_id,),) = query(cluster, "SELECT request_id FROM orchestrator_runs WHERE session_id = %s", session_id)
    with trio.fail_after(30):
        async with httpx.AsyncClient(timeout=30) as http:
            parked, rest = await parked_then_answered(http, staying.url, session_id, request_id)
    resumed = [e for e in parked.events if e["type"] == "run_resumed"]
    assert len(resumed) == 1, parked.types
    assert int(resumed[0]["worker"].split(":")[-2]) in server_pids(staying), resumed
    events = parked.events + rest.events
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "run_completed" and events[-1]["result"]["content"] == "Done with slow job: yes."
    records = [e for e in events if e["type"] == "tool_completed" and e["call"]["name"] == "record"]
    assert [e["result"]["content"] for e in records] == ["recorded slow job"], records
    # Handed back with its lease ended (15 s): resumed right after the call's result was committed.
    assert resumed[0]["ts"] - records[0]["ts"] < 2.0, (resumed[0]["ts"], records[0]["ts"])
    assert cluster.records() == ["slow job"]  # the ledger: the call ran once


async def test_sigterm_to_a_carrying_uvicorn_hands_its_run_to_another_at_once(postgres_cluster: Cluster) -> None:
    cluster = postgres_cluster
    try:
        nodes = [cluster.uvicorn_web("two", workers=2, app=APP), cluster.uvicorn_web("one", app=APP)]
        leaving, staying = await start_slow_run(cluster, nodes, "drain")
        await resumed_and_finished(cluster, leaving, staying, "drain")
        assert "Finished server process" in leaving.output(), leaving.output()
    except BaseException:
        print(cluster.logs())
        raise


async def test_without_a_lifespan_the_first_request_starts_carrying(sqlite_cluster: Cluster) -> None:
    cluster = sqlite_cluster
    try:
        web = cluster.uvicorn_web("web", app=APP, lifespan=False)
        with trio.fail_after(60):
            async with httpx.AsyncClient(timeout=30) as http:
                started = await http.post(f"{web.url}/sessions/lazy/runs", json={"input": "job"})
                assert started.status_code == 202, started.text
                _, rest = await parked_then_answered(http, web.url, "lazy", started.json()["request_id"])
        assert rest.types[-1] == "run_completed", rest.types
        assert rest.events[-1]["result"]["content"] == "Done with job: yes."
        assert carrier_pids(cluster) == {web.process.pid}
        assert cluster.records() == ["job"]
    except BaseException:
        print(cluster.logs())
        raise


async def test_an_agent_that_cannot_be_loaded_fails_the_startup_or_the_request_saying_why(tmp_path: Path) -> None:
    from orchestrator.cli.apploader import AppSpecError
    from orchestrator.cluster.asgi import web_node

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(AppSpecError, match="MODULE:ATTR"):
        web_node(url, token="t", app="tests.cluster.apps")
    app = web_node(url, token="t", app="tests.cluster.apps:missing")
    arriving = [{"type": "lifespan.startup"}]
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return arriving.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)  # type: ignore[arg-type]
    why = "runs are not carried: AppSpecError: 'tests.cluster.apps' has no attribute 'missing'"
    assert sent == [{"type": "lifespan.startup.failed", "message": why}]
    # Without a lifespan, each request that would start the carrier answers why it cannot.
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as http:
        answer = await http.get("/health")
    assert answer.status_code == 500
    assert answer.json() == {"error": {"type": "CarrierFailed", "message": why}}

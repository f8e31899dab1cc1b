"""Retention on a web node, under a running workload: a prune pass takes ended runs and idle sessions (no row
of any table keeps a pruned session's id) while running and parked runs and their sessions stay; following a
pruned run answers 410 with its reason, natively and over A2A, and an unknown one 404."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.store.retention import Retention
from orchestrator.store.runs_sql import SQLRunStore, postgres_run_store, sqlite_run_store
from tests.cluster import apps
from tests.server.support import read_sse, serving

HOUR = 3600.0


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")
    return tmp_path / "marks"


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "cluster.db")
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


def open_store(target: str) -> SQLRunStore:
    return postgres_run_store(target) if target.startswith("postgresql") else sqlite_run_store(target)


def rows_holding(target: str, text: str) -> list[str]:
    """Every row of every table in the database ``target`` with a value holding ``text``."""
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as db:
            tables = db.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            ).fetchall()
            return [f"{t}: {row}" for (t,) in tables for row in db.execute(f"SELECT * FROM {t}") if text in repr(row)]
    db = sqlite3.connect(target)
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [f"{t}: {row}" for t in tables for row in db.execute(f"SELECT * FROM {t}") if text in repr(row)]
    finally:
        db.close()


@pytest.fixture
def stores(target: str) -> Iterator[tuple[SQLRunStore, SQLRunStore]]:
    web, work = open_store(target), open_store(target)
    try:
        yield web, work
    finally:
        web.close()
        work.close()


async def test_a_prune_pass_under_load_keeps_running_and_parked_runs_and_takes_ended_runs_and_idle_sessions(
    target: str, stores: tuple[SQLRunStore, SQLRunStore]
) -> None:
    web_store, work_store = stores
    worker = Worker(await apps.approval_agent(), work_store, name="w", poll_seconds=0.05)
    backend = StoreBackend(web_store, poll_seconds=0.02)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=10) as http:
            await nursery.start(worker.run)
            async with serving(backend) as base:  # type: ignore[arg-type]

                async def start(session_id: str, text: str) -> str:
                    started = await http.post(f"{base}/sessions/{session_id}/runs", json={"input": text})
                    assert started.status_code == 202, started.text
                    request_id: str = started.json()["request_id"]
                    return request_id

                async def until(request_id: str, kind: str) -> list[dict[str, Any]]:
                    got = await read_sse(http, f"{base}/runs/{request_id}/events", stop=lambda e: e["type"] == kind)
                    return got.events

                async def answer(session_id: str, question: dict[str, Any]) -> None:
                    payload = {"tool_call_id": question["waiting"][0], "answer": "yes"}
                    body = {"name": "ask_user_response", "payload": payload}
                    assert (await http.post(f"{base}/sessions/{session_id}/events", json=body)).status_code == 202

                ended = await start("session-ended-4c1e", "first")
                parked_event = (await until(ended, "run_parked"))[-1]
                await answer("session-ended-4c1e", parked_event)
                await until(ended, "run_completed")
                parked = await start("session-parked", "second")
                await until(parked, "run_parked")
                running = await start("session-running", "slow")  # its record call holds 3 s
                await until(running, "tool_started")

                retention = Retention(ended_runs_after=HOUR, idle_sessions_after=HOUR)
                assert (await backend.prune(retention)).runs == 0  # nothing is an hour old yet
                report = await backend.prune(retention, time.time() + 2 * HOUR)
                assert report.runs == 1 and report.sessions == ("session-ended-4c1e",)
                assert rows_holding(target, "session-ended-4c1e") == []
                assert {run.session_id for run in web_store.runs()} == {"session-parked", "session-running"}
                assert web_store.run(running) is not None and web_store.run(running).status == "running"  # type: ignore[union-attr]

                gone = await http.get(f"{base}/runs/{ended}/events")
                assert gone.status_code == 410, gone.text
                assert gone.json()["error"]["type"] == "RunPruned"
                assert "was pruned (it ended past its retention)" in gone.json()["error"]["message"]
                assert (await http.get(f"{base}/runs/{ended}")).status_code == 410
                a2a = await http.post(
                    f"{base}/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": ended}}
                )
                assert a2a.status_code == 410 and a2a.json()["error"]["type"] == "RunPruned"
                unknown = await http.get(f"{base}/runs/never-was/events")
                assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "NotFound"

                # The survivors go on: the parked run takes its answer, the running one parks and ends too.
                for session_id, request_id in (("session-parked", parked), ("session-running", running)):
                    question = (await until(request_id, "run_parked"))[-1]
                    await answer(session_id, question)
                    assert (await until(request_id, "run_completed"))[-1]["type"] == "run_completed"
            nursery.cancel_scope.cancel()


def test_a_new_run_under_a_pruned_id_supersedes_its_memory_and_old_memories_are_forgotten(
    stores: tuple[SQLRunStore, SQLRunStore],
) -> None:
    from orchestrator.messages import UserMessage
    from orchestrator.store.runs import RunCommit
    from orchestrator.wire.format import encode_message

    store, _ = stores
    store.create_run("s1", "r1", encode_message(UserMessage("hi")))
    (lease,) = store.claim("w", 30)
    store.commit(lease, RunCommit(status="completed"))
    assert store.pruned("r1") is None
    assert store.prune(time.time() + 1) == 1
    remembered = store.pruned("r1")
    assert remembered is not None and remembered.reason == "ended"
    assert store.forget_pruned(remembered.pruned - 1) == 0
    store.create_run("s1", "r1", encode_message(UserMessage("again")))
    assert store.pruned("r1") is None and store.run("r1") is not None
    (lease,) = store.claim("w", 30)
    store.commit(lease, RunCommit(status="completed"))
    assert store.prune(time.time() + 1) == 1
    assert store.forget_pruned(time.time() + 1) == 1 and store.pruned("r1") is None


async def test_a_web_node_served_with_a_retention_prunes_as_it_runs(tmp_path: Path) -> None:
    from orchestrator.messages import UserMessage
    from orchestrator.store.runs import RunCommit
    from orchestrator.wire.format import encode_message

    store = sqlite_run_store(str(tmp_path / "cluster.db"))
    try:
        store.create_run("s1", "r1", encode_message(UserMessage("hi")))
        (lease,) = store.claim("w", 30)
        store.commit(lease, RunCommit(status="completed"))
        backend = StoreBackend(store, poll_seconds=0.02)
        with trio.fail_after(20):
            async with (
                serving(backend, retention=Retention(ended_runs_after=0.2)) as base,  # type: ignore[arg-type]
                httpx.AsyncClient(timeout=10) as http,
            ):
                while (shown := await http.get(f"{base}/runs/r1")).status_code != 410:
                    assert shown.status_code == 200, shown.text
                    await trio.sleep(0.05)  # pruned 0.2 s after it ended, by the node's own pass
                assert shown.json()["error"]["type"] == "RunPruned"
                assert (await http.get(f"{base}/runs/r1/events")).status_code == 410
    finally:
        store.close()

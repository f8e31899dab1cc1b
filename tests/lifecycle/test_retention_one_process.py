"""Retention in one process: ended runs and idle sessions are pruned, live and waiting ones never; following a
pruned run answers 410 with its reason (an unknown one 404), on the native route and over A2A."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import (
    AgentHost,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolMessage,
    UserMessage,
    create_agent,
)
from orchestrator.config import AgentRunConfig
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.runtime.handle import RunPruned, UnknownRun
from orchestrator.server.app import create_app
from orchestrator.server.backend import RunStart
from orchestrator.server.hosted import HostBackend
from orchestrator.server.serve import parse
from orchestrator.store.retention import PruneReport, Retention, RetentionRefused
from tests.server.support import serving
from tests.support import asks, call

HOUR = 3600.0


def rows_holding(path: Path, text: str) -> list[str]:
    db = sqlite3.connect(path)
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [f"{t}: {row}" for t in tables for row in db.execute(f"SELECT * FROM {t}") if text in repr(row)]
    finally:
        db.close()


@pytest.mark.parametrize(
    ("fields", "setting", "value"),
    [
        ({"ended_runs_after": 0}, "ended_runs_after", 0),
        ({"ended_runs_after": -1.5}, "ended_runs_after", -1.5),
        ({"idle_sessions_after": math.nan}, "idle_sessions_after", math.nan),
        ({"idle_sessions_after": True}, "idle_sessions_after", True),
        ({"tombstones_for": None}, "tombstones_for", None),
        ({"ended_runs_after": "1h"}, "ended_runs_after", "1h"),
    ],
)
def test_a_non_positive_or_non_numeric_age_is_refused_naming_the_setting(
    fields: dict[str, Any], setting: str, value: object
) -> None:
    with pytest.raises(RetentionRefused) as refused:
        Retention(**fields)
    assert refused.value.setting == setting
    assert f"Retention.{setting} must be a number of seconds above 0" in str(refused.value)
    assert isinstance(refused.value, ValueError)


def test_a_pass_runs_every_tenth_of_the_shortest_age_at_most_hourly() -> None:
    assert Retention(ended_runs_after=100, idle_sessions_after=50).every == 5
    assert Retention.hours(ended_runs=24 * 7).every == 3600
    assert Retention.hours(idle_sessions=2) == Retention(idle_sessions_after=7200)


def test_serve_takes_the_retention_flags_and_refuses_a_non_positive_one(capsys: pytest.CaptureFixture[str]) -> None:
    options = parse(["--retention-hours", "24", "--session-retention-hours", "720", "--no-token"])
    assert options.retention == Retention(ended_runs_after=24 * HOUR, idle_sessions_after=720 * HOUR)
    assert parse(["--no-token"]).retention is None
    with pytest.raises(SystemExit) as stopped:
        parse(["--retention-hours", "0"])
    assert stopped.value.code == 2
    assert "--retention-hours must be above 0, got 0" in capsys.readouterr().err


async def test_create_app_refuses_a_retention_that_is_no_retention() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("hello")]))
    with pytest.raises(TypeError, match="retention must be a Retention or None, got int"):
        create_app(client, retention=24)  # type: ignore[arg-type]


async def test_the_app_prunes_ended_runs_as_it_runs_and_a_pruned_run_is_410_an_unknown_one_404() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("hello")], repeat_last=True))
    with trio.fail_after(20):
        async with (
            serving(client, retention=Retention(ended_runs_after=0.2)) as base,
            httpx.AsyncClient(timeout=10) as http,
        ):
            started = await http.post(f"{base}/sessions/s1/runs", json={"input": "hi"})
            request_id = started.json()["request_id"]
            while (events := await http.get(f"{base}/runs/{request_id}/events")).status_code != 410:
                assert events.status_code == 200, events.text
                await trio.sleep(0.05)  # pruned 0.2 s after it ended, by the app's own pass
            error = events.json()["error"]
            assert error["type"] == "RunPruned"
            assert f"run {request_id!r} was pruned (it ended past its retention)" in error["message"]
            shown = await http.get(f"{base}/runs/{request_id}")
            assert shown.status_code == 410 and shown.json()["error"]["type"] == "RunPruned"
            unknown = await http.get(f"{base}/runs/never-was/events")
            assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "NotFound"
            a2a = await http.post(
                f"{base}/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": request_id}}
            )
            assert a2a.status_code == 410, a2a.text
            assert a2a.json()["error"]["type"] == "RunPruned"


def ask_then_answer(request: ModelRequest) -> AssistantMessage:
    """Each request asks once, then answers."""
    if isinstance(request.messages[-1], ToolMessage):
        return AssistantMessage("ok")
    return asks(call("q1", "ask_user", question="Go?", options=["yes", "no"]))


def asking_model() -> ScriptedModel:
    return ScriptedModel([ask_then_answer], repeat_last=True)


async def test_idle_sessions_go_from_the_store_but_a_waiting_one_stays_and_no_row_holds_a_pruned_id(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteSessionStore(path)
    client = await create_agent(asking_model(), history=None, extensions=[store, AskUserExtension()])
    retention = Retention(ended_runs_after=HOUR, idle_sessions_after=HOUR)
    with trio.fail_after(20):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            ended = await client.start("go", config=AgentRunConfig("idle-gone"))
            while not client.pending("idle-gone"):
                await trio.sleep(0.01)
            answer = {"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "yes"}}
            assert (await http.post(f"{base}/sessions/idle-gone/events", json=answer)).status_code == 202
            await ended.wait()
            waiting = await client.start("go", config=AgentRunConfig("waits"))
            while not client.pending("waits"):
                await trio.sleep(0.01)
            assert await client.prune(retention) == PruneReport()  # nothing is an hour old
            report = await client.prune(retention, now=time.time() + 2 * HOUR)
            assert report.sessions == ("idle-gone",) and report.runs == 1
            assert rows_holding(path, "idle-gone") == []
            assert len(await client.history("waits")) == 2  # the waiting session stays whole
            assert not waiting.done and client.pending("waits")
            gone = await http.get(f"{base}/runs/{ended.request_id}/events")
            assert gone.status_code == 410 and gone.json()["error"]["type"] == "RunPruned"
            assert (await http.get(f"{base}/runs/{waiting.request_id}")).status_code == 200
            waiting.cancel()
            await waiting.wait()
    store.close()


async def test_a_pruned_run_is_remembered_for_tombstones_for_then_unknown() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("hello")], repeat_last=True))
    handle = await client.start("hi", config=AgentRunConfig("s1"))
    await handle.wait()
    now = time.time()
    await client.prune(Retention(ended_runs_after=60, tombstones_for=HOUR), now=now + 120)
    with pytest.raises(RunPruned) as pruned:
        client.attach(handle.request_id)
    assert pruned.value.reason == "ended" and pruned.value.pruned == now + 120
    await client.prune(Retention(ended_runs_after=60, tombstones_for=HOUR), now=now + 120 + 2 * HOUR)
    with pytest.raises(UnknownRun) as unknown:
        client.attach(handle.request_id)
    assert not isinstance(unknown.value, RunPruned)
    again = await client.start("hi", config=AgentRunConfig("s1", request_id=handle.request_id))
    await again.wait()
    assert client.attach(handle.request_id) is again  # a new run of that id supersedes the memory


def test_an_agent_host_backend_prunes_in_the_hosts_thread() -> None:
    host = AgentHost(lambda: create_agent(ScriptedModel([AssistantMessage("hello")], repeat_last=True)))
    backend = HostBackend(host)

    async def main() -> tuple[int, int]:
        request_id = await backend.start(RunStart("s1", UserMessage("hi")))
        while not (await backend.run(request_id)).done:
            await asyncio.sleep(0.01)
        report = await backend.prune(Retention(ended_runs_after=60), time.time() + 120)
        try:
            await backend.run(request_id)
        except RunPruned:
            return report.runs, 410
        return report.runs, 200

    try:
        assert asyncio.run(asyncio.wait_for(main(), 20)) == (1, 410)
    finally:
        host.close()


def postgres_rows_holding(dsn: str, text: str) -> list[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        tables = db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
        return [f"{t}: {row}" for (t,) in tables for row in db.execute(f"SELECT * FROM {t}") if text in repr(row)]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "memory"])
async def test_every_session_store_prunes_idle_sessions_and_keeps_running_and_waiting_ones(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from orchestrator import tool
    from orchestrator.extensions.session_store import SessionStoreExtension
    from orchestrator.store.interface import SessionStore
    from orchestrator.store.memory import MemoryStore
    from orchestrator.store.sqlite import SQLiteStore

    store: SessionStore
    if kind == "sqlite":
        store = SQLiteStore(tmp_path / "sessions.db")
    elif kind == "postgresql":
        from orchestrator.store.postgres import PostgresStore

        dsn = request.getfixturevalue("postgres_dsn")
        store = PostgresStore(dsn)
    else:
        store = MemoryStore()
    release = trio.Event()

    @tool
    async def hold() -> str:
        """Hold until released."""
        await release.wait()
        return "released"

    def step(request: ModelRequest) -> AssistantMessage:
        last = request.messages[-1]
        text = [m for m in request.messages if m.role == "user"][-1].text
        if isinstance(last, ToolMessage):
            return AssistantMessage("ok")
        if "hold" in text:
            return asks(call("h1", "hold"))
        if "ask" in text:
            return asks(call("q1", "ask_user", question="Go?", options=["yes", "no"]))
        return AssistantMessage("done")

    client = await create_agent(
        ScriptedModel([step], repeat_last=True),
        tools=[hold],
        history=None,
        extensions=[SessionStoreExtension(store), AskUserExtension()],
    )
    with trio.fail_after(20):
        ended = await client.start("finish", config=AgentRunConfig("idle-gone-9d2b"))
        await ended.wait()
        running = await client.start("hold on", config=AgentRunConfig("runs"))
        waiting = await client.start("ask me", config=AgentRunConfig("waits"))
        while not client.pending("waits"):
            await trio.sleep(0.01)
        report = await client.prune(Retention(idle_sessions_after=HOUR), now=time.time() + 2 * HOUR)
        assert report.sessions == ("idle-gone-9d2b",)
        assert await client.history("idle-gone-9d2b") == []
        assert store.rows("idle-gone-9d2b") == [] and sorted(store.sessions()) == ["runs", "waits"]
        if kind == "sqlite":
            assert rows_holding(tmp_path / "sessions.db", "idle-gone-9d2b") == []
        elif kind == "postgresql":
            assert postgres_rows_holding(dsn, "idle-gone-9d2b") == []
        with pytest.raises(RunPruned) as pruned:
            client.attach(ended.request_id)
        assert pruned.value.reason == "idle_session"
        release.set()
        await running.wait()
        assert running.state == "completed" and not waiting.done
        waiting.cancel()
        await waiting.wait()
    store.close()


def test_an_agent_host_app_prunes_in_its_asgi_lifespan_under_asyncio() -> None:
    host = AgentHost(lambda: create_agent(ScriptedModel([AssistantMessage("hello")], repeat_last=True)))
    app = create_app(host, retention=Retention(ended_runs_after=0.2))

    async def main() -> str:
        messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        sent: list[dict[str, Any]] = []
        await messages.put({"type": "lifespan.startup"})

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, messages.get, send))
        run = await host.start("hi", config=AgentRunConfig("s1"))
        await host.run("again", config=AgentRunConfig("s2"))  # s1's run has ended by now too, or soon
        try:
            while True:
                try:
                    await host.follow(run.request_id)
                except RunPruned as pruned:
                    return pruned.reason
                await asyncio.sleep(0.05)  # the lifespan's pass prunes it 0.2 s after it ended
        finally:
            await messages.put({"type": "lifespan.shutdown"})
            await lifespan
            assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]

    try:
        assert asyncio.run(asyncio.wait_for(main(), 20)) == "ended"
    finally:
        host.close()

"""Deleting a session removes its history, runs, event logs, inbox and waits from every store, refuses while
a run of it runs (409 over HTTP) unless asked to cancel it, and leaves other sessions alone."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ScriptedModel, UserMessage, create_agent
from orchestrator.config import AgentRunConfig
from orchestrator.errors import SessionBusy
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.history import InMemoryHistory
from orchestrator.store.runs import LeaseLost, NewInboxItem, RunCommit, StoredEvent
from orchestrator.store.runs_sql import SQLRunStore, postgres_run_store, sqlite_run_store
from orchestrator.wire.format import encode_message
from tests.server.support import serving
from tests.support import asks, call

GONE = "gone-7f3a"


@pytest.fixture(params=["sqlite", "postgres"])
def run_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SQLRunStore, str]]:
    if request.param == "sqlite":
        target = str(tmp_path / "runs.db")
        store = sqlite_run_store(target)
    else:
        target = request.getfixturevalue("postgres_dsn")
        store = postgres_run_store(target)
    try:
        yield store, target
    finally:
        store.close()


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


def fill(store: SQLRunStore, *session_ids: str) -> None:
    """For each session a completed run with history and events, then a parked run; then an answer to each."""
    for session_id in session_ids:
        fill_one(store, session_id)
    for session_id in session_ids:
        answer = {"tool_call_id": "q1", "answer": "yes"}
        request_id = f"{session_id}-r2"
        store.post(NewInboxItem(session_id, request_id, "ask_user_response", answer, f"{session_id}-key"))


def fill_one(store: SQLRunStore, session_id: str) -> None:
    store.create_run(session_id, f"{session_id}-r1", encode_message(UserMessage("first")))
    (lease,) = store.claim("w", 30)
    event = StoredEvent(lease.request_id, 1, "run_started", {"type": "run_started", "session_id": session_id})
    change = RunCommit(messages=(UserMessage("first"), AssistantMessage("done")), events=(event,), status="completed")
    store.commit(lease, change)
    store.create_run(session_id, f"{session_id}-r2", encode_message(UserMessage("second")))
    (lease,) = store.claim("w", 30)
    store.commit(lease, RunCommit(checkpoint={"waiting": session_id}, status="parked"))


def test_deleting_a_session_from_a_run_store_leaves_no_row_holding_its_id(run_store: tuple[SQLRunStore, str]) -> None:
    store, target = run_store
    fill(store, GONE, "kept")
    assert rows_holding(target, GONE)
    assert store.delete_session(GONE) is True
    assert rows_holding(target, GONE) == []
    assert store.delete_session(GONE) is False
    assert [run.request_id for run in store.runs("kept")] == ["kept-r1", "kept-r2"]
    assert len(store.history("kept")) == 2 and len(store.inbox("kept-r2")) == 1


def test_a_running_run_refuses_the_delete_unless_cancelled_and_its_worker_then_writes_nothing(
    run_store: tuple[SQLRunStore, str],
) -> None:
    store, target = run_store
    store.create_run(GONE, "held", encode_message(UserMessage("work")))
    (lease,) = store.claim("w", 30)
    with pytest.raises(SessionBusy):
        store.delete_session(GONE)
    assert store.run("held") is not None
    assert store.delete_session(GONE, cancel=True) is True
    with pytest.raises(LeaseLost, match="gone"):
        store.commit(lease, RunCommit(messages=(AssistantMessage("late"),)))
    with pytest.raises(LeaseLost):
        store.renew(lease, 30)
    assert rows_holding(target, GONE) == []


def asking_model() -> ScriptedModel:
    return ScriptedModel([asks(call("q1", "ask_user", question="Go?", options=["yes", "no"])), AssistantMessage("ok")])


async def test_http_delete_removes_a_session_from_the_agent_and_its_sqlite_store(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteSessionStore(path)
    client = await create_agent(
        ScriptedModel([AssistantMessage("hello")], repeat_last=True), history=None, extensions=[store]
    )
    with trio.fail_after(20):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            await client.run("hi", config=AgentRunConfig(GONE))
            await client.run("hi", config=AgentRunConfig("kept"))
            assert (await http.get(f"{base}/sessions/{GONE}")).status_code == 200
            deleted = await http.delete(f"{base}/sessions/{GONE}")
            assert deleted.status_code == 200 and deleted.json() == {"deleted": GONE}
            assert (await http.get(f"{base}/sessions/{GONE}")).status_code == 404
            again = await http.delete(f"{base}/sessions/{GONE}")
            assert again.status_code == 404 and again.json()["error"]["type"] == "NotFound"
            assert (await http.get(f"{base}/sessions/kept")).status_code == 200
    store.close()
    assert rows_holding(str(path), GONE) == []


async def test_http_delete_of_a_session_whose_run_runs_is_409_unless_cancel_true() -> None:
    client = await create_agent(asking_model(), extensions=[AskUserExtension()])
    with trio.fail_after(20):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            started = await http.post(f"{base}/sessions/{GONE}/runs", json={"input": "go"})
            request_id = started.json()["request_id"]
            while not client.pending(GONE):
                await trio.sleep(0.01)
            busy = await http.delete(f"{base}/sessions/{GONE}")
            assert busy.status_code == 409, busy.text
            assert busy.json()["error"]["type"] == "SessionBusy" and "cancel=true" in busy.json()["error"]["message"]
            bad = await http.delete(f"{base}/sessions/{GONE}?cancel=yes")
            assert bad.status_code == 400
            cancelled = await http.delete(f"{base}/sessions/{GONE}?cancel=true")
            assert cancelled.status_code == 200, cancelled.text
            assert (await http.get(f"{base}/runs/{request_id}")).status_code == 404
            assert client.pending(GONE) == [] and await client.history(GONE) == []


def test_in_memory_history_forgets_the_least_recently_used_session_past_its_cap() -> None:
    history = InMemoryHistory(max_sessions=2)
    history.append("a", UserMessage("1"))
    history.append("b", UserMessage("2"))
    history.load("a")  # a is now the most recently used
    history.append("c", UserMessage("3"))
    assert history.sessions() == ["a", "c"]
    assert history.delete("a") is True and history.sessions() == ["c"]
    with pytest.raises(ValueError, match="max_sessions"):
        InMemoryHistory(max_sessions=0)


def test_idle_sessions_are_pruned_with_their_runs_but_never_one_with_a_live_or_parked_run(
    run_store: tuple[SQLRunStore, str],
) -> None:
    import time

    store, target = run_store
    fill_one(store, "idle-old")  # a completed run, and a parked one
    store.create_run("idle-live", "live-r1", encode_message(UserMessage("work")))
    store.claim("w", 30)
    store.create_run("idle-ended", "ended-r1", encode_message(UserMessage("done")))
    (ended,) = store.claim("w", 30)
    event = StoredEvent("ended-r1", 1, "run_started", {"type": "run_started", "session_id": "idle-ended"})
    store.commit(ended, RunCommit(messages=(UserMessage("done"),), events=(event,), status="completed"))
    assert store.prune_sessions(time.time() - 3600) == []  # nothing has been idle an hour
    assert store.prune_sessions(time.time() + 10) == ["idle-ended"]
    assert rows_holding(target, "idle-ended") == []
    assert {run.session_id for run in store.runs()} == {"idle-old", "idle-live"}
    assert len(store.history("idle-old")) == 2


def test_an_agent_host_deletes_a_session_from_asyncio() -> None:
    import asyncio

    from orchestrator import AgentHost

    host = AgentHost(lambda: create_agent(ScriptedModel([AssistantMessage("hello")], repeat_last=True)))

    async def main() -> tuple[bool, bool, int, int]:
        await host.run("hi", config=AgentRunConfig(GONE))
        await host.run("hi", config=AgentRunConfig("kept"))
        first = await host.delete_session(GONE)
        second = await host.delete_session(GONE)
        return first, second, len(await host.history(GONE)), len(await host.history("kept"))

    try:
        assert asyncio.run(asyncio.wait_for(main(), 20)) == (True, False, 0, 2)
    finally:
        host.close()

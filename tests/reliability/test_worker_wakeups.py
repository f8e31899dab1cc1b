"""A worker is woken by the store, not by polls: it claims when a slot frees, and its held runs do not poll their inbox.

Real pieces: a throwaway PostgreSQL (``tests/pg.py``), the run store and a Worker
in this process carrying a scripted agent. Transactions are the database's own
count (``pg_stat_database.xact_commit``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from orchestrator import AgentClient, AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from orchestrator.cluster import Worker
from orchestrator.store.runs_sql import postgres_run_store
from tests.cluster import apps
from tests.support import asks, call

HELD = 8
HOLD_SECONDS = 7.0


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")
    return tmp_path / "marks"


def _committed(dsn: str) -> int:
    """The database's count of committed transactions, once its backends had time to report them."""
    import psycopg

    time.sleep(1.5)  # a busy backend reports its counts about once a second
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


@tool(thread=True)
def hold() -> str:
    """Hold the run for a while, as a slow call to another service does."""
    time.sleep(HOLD_SECONDS)
    return "held"


def _holding_step(request: ModelRequest) -> AssistantMessage:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return asks(call("h1", "hold"))
    return AssistantMessage("Done.")


async def _holding_agent() -> AgentClient:
    return await create_agent(ScriptedModel([_holding_step], repeat_last=True), tools=[hold])


async def test_runs_held_in_a_slow_call_do_not_read_their_inbox_until_something_is_posted(postgres_dsn: str) -> None:
    store = postgres_run_store(postgres_dsn)
    try:
        for index in range(HELD):
            store.create_run(f"s{index}", f"r{index}", {"role": "user", "content": "go"})
        # Every slot for a new run: none kept for resumed ones.
        worker = Worker(await _holding_agent(), store, name="w", capacity=HELD, poll_seconds=60, resume_reserve=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            with trio.fail_after(30):
                while sum(1 for d in worker.active.values() if d is not None and d.phases) < HELD:
                    await trio.sleep(0.05)
            before = await trio.to_thread.run_sync(_committed, postgres_dsn)
            after = await trio.to_thread.run_sync(_committed, postgres_dsn)
            # Inbox polls every 0.1 s would be about 8 x 10 x 3 = 240 reads; heartbeats are a few.
            assert after - before <= 30, f"{after - before} transactions while {HELD} runs were held in a call"
            with trio.fail_after(30):
                while {record.status for record in store.runs()} != {"completed"}:
                    await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_a_full_worker_claims_the_next_run_as_soon_as_a_slot_frees(postgres_dsn: str) -> None:
    store = postgres_run_store(postgres_dsn)
    try:
        store.create_run("s1", "r1", {"role": "user", "content": "first"})
        store.create_run("s2", "r2", {"role": "user", "content": "second"})
        # One slot, and a poll so long that only a wake-up can start the second run in time.
        worker = Worker(await apps.approval_agent(), store, name="w", capacity=1, poll_seconds=120)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            with trio.fail_after(30):  # the first run parks on its question; the second is claimed then
                while {record.status for record in store.runs()} != {"parked"}:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    finally:
        store.close()

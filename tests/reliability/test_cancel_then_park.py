"""A run asked to stop while it ran, which parks before its worker sees the flag, still ends cancelled."""

from __future__ import annotations

from pathlib import Path

import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent
from orchestrator.cluster import Worker
from orchestrator.events import RunCancelledEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.store.runs import RunCommit, StoredEvent
from orchestrator.store.runs_sql import sqlite_run_store
from orchestrator.wire import encode_event
from tests.support import asks, call


def _final(seq: int) -> StoredEvent:
    event = RunCancelledEvent(session_id="s1", request_id="r1", seq=seq, ts=0.0)
    return StoredEvent("r1", seq, event.name, encode_event(event))


def test_a_park_after_a_cancel_request_queues_the_run_for_its_cancellation(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    store.create_run("s1", "r1", {"role": "user", "content": "hi"})
    (lease,) = store.claim("w", 30.0)
    flagged = store.cancel("r1", _final)
    assert flagged.status == "running" and flagged.cancel_requested
    store.commit(lease, RunCommit(status="parked"))  # its worker parks it before its heartbeat sees the flag
    record = store.run("r1")
    assert record is not None and record.status == "queued" and record.cancel_requested


def _ask(request: ModelRequest) -> AssistantMessage:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return asks(call("q1", "ask_user", question="Which?", options=["a", "b"]))
    return AssistantMessage("done")


async def test_the_queued_run_is_claimed_and_ends_cancelled_with_its_open_call_settled(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    store.create_run("s1", "r1", {"role": "user", "content": "hi"})
    (lease,) = store.claim("gone", 30.0)
    store.cancel("r1", _final)
    store.commit(lease, RunCommit(status="parked"))
    client = await create_agent(ScriptedModel([_ask], repeat_last=True), extensions=[AskUserExtension()])
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.05)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while (record := store.run("r1")) is None or record.status != "cancelled":
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert [e.type for e in store.events("r1")][-1] == "run_cancelled"

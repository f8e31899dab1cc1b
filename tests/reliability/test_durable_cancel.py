"""Cancelling stored runs: a running run whose thread tool outlasts its lease, and a flagged run nobody holds."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from orchestrator.cluster import Worker
from orchestrator.cluster.durable import STOPPED_MID_CALL
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.messages import UserMessage
from orchestrator.store.runs import RunCommit
from orchestrator.store.runs_sql import sqlite_run_store
from tests.support import asks, call

LEASE_SECONDS = 0.3


async def test_cancelling_a_run_whose_thread_tool_outlasts_its_lease_ends_it_cancelled_once(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"

    @tool(thread=True)
    def hold(seconds: float) -> str:
        """Work for a while (a blocking call), writing one ledger line per execution.

        Args:
            seconds: how long
        """
        with ledger.open("a") as out:
            out.write("held\n")
        time.sleep(seconds)
        return "held to the end"

    def step(request: ModelRequest) -> AssistantMessage:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return asks(call("h1", "hold", seconds=LEASE_SECONDS * 6))
        return AssistantMessage("Done.")

    client = await create_agent(ScriptedModel([step], repeat_last=True), tools=[hold])
    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    store.create_run("s1", "r1", {"role": "user", "content": "work"})
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.02, lease_seconds=LEASE_SECONDS)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while not ledger.exists():
                await trio.sleep(0.02)
            view, asked = await StoreBackend(store).cancel("r1")  # type: ignore[arg-type]
            assert asked and not view.done  # flagged: its worker holds it
            while (record := store.run("r1")) is None or not record.final:
                await trio.sleep(0.02)
            await trio.sleep(LEASE_SECONDS * 3)  # nothing claims it afterwards
            nursery.cancel_scope.cancel()
    record = store.run("r1")
    assert record is not None and record.status == "cancelled", record
    # One claim and a handful of commits: no claim and give-back loop while the thread ran.
    assert record.version < 12, f"version {record.version}: claimed and given back in a loop"
    assert record.checkpoint is not None and record.checkpoint["states"], "the checkpoint's states were wiped"
    assert ledger.read_text().splitlines() == ["held"]
    results = [m for m in store.history("s1") if isinstance(m, ToolMessage)]
    assert len(results) == 1 and STOPPED_MID_CALL not in results[0].text, results
    assert [e.type for e in store.events("r1")][-1] == "run_cancelled"


async def test_a_flagged_run_claimed_after_its_worker_died_is_cancelled_not_resumed(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool
    def charge(order: str) -> str:
        """Charge an order.

        Args:
            order: which
        """
        ran.append(order)
        return "charged"

    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    store.create_run("s1", "r1", {"role": "user", "content": "charge it"})
    (dead,) = store.claim("dead", 0.2)
    response = asks(call("c1", "charge", order="o-1"))
    store.commit(dead, RunCommit(messages=(UserMessage("charge it"), response)))
    await StoreBackend(store).cancel("r1")  # type: ignore[arg-type]  # flagged: "dead" holds it
    await trio.sleep(0.3)  # its lease runs out

    client = await create_agent(ScriptedModel([AssistantMessage("Charged.")]), tools=[charge])
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.02)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while (record := store.run("r1")) is None or not record.final:
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert record.status == "cancelled"
    assert ran == []
    history = store.history("s1")
    results = [(m.tool_call_id, m.status.value) for m in history if isinstance(m, ToolMessage)]
    assert results == [("c1", "cancelled")], "the cancelled run left its call without a result"
    assert [e.type for e in store.events("r1")][-1] == "run_cancelled"


async def test_a_call_whose_approval_was_consumed_before_its_worker_died_is_not_asked_again(tmp_path: Path) -> None:
    from orchestrator.cluster.checkpoint import Checkpoint, Waiting
    from orchestrator.extensions.tool_approval import ToolApprovalExtension

    ran: list[str] = []

    @tool
    def charge(order: str) -> str:
        """Charge an order.

        Args:
            order: which
        """
        ran.append(order)
        return f"charged {order}"

    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    store.create_run("s1", "r1", {"role": "user", "content": "charge it"})
    (dead,) = store.claim("dead", 0.2)
    question = {"tool_call_id": "c1", "name": "charge", "arguments": {"order": "o-1"}}
    # What the dead worker committed: the approval consumed, the body not entered yet.
    ledger = Checkpoint(
        {},
        1,
        True,
        ("c1",),
        (Waiting("c1", "tool_approval", question, "tool_approval_response"),),
        None,
        phases={"c1": "answered"},
        answers={"c1": {"tool_call_id": "c1", "approved": True}},
    )
    response = asks(call("c1", "charge", order="o-1"))
    store.commit(dead, RunCommit(messages=(UserMessage("charge it"), response), checkpoint=ledger.json()))
    await trio.sleep(0.3)  # its lease runs out

    model = ScriptedModel([AssistantMessage("Charged.")])
    client = await create_agent(model, tools=[charge], extensions=[ToolApprovalExtension({"charge": "ask"})])
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.02)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while (record := store.run("r1")) is None or not record.final:
                assert record is None or record.status != "parked", "a person was asked again for a consumed answer"
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert record.status == "completed"
    assert ran == ["o-1"]
    results = [m.text for m in store.history("s1") if isinstance(m, ToolMessage)]
    assert results == ["charged o-1"]

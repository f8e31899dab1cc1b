"""An answered run is resumed while new runs hold a worker's other slots: new runs take at most
``capacity - resume_reserve`` slots, so a burst of them never keeps an answered run waiting for one to end.

Real pieces: an SQLite run store file and a Worker in this process carrying a scripted agent whose new runs
hold their slot in a tool until the test lets them go.
"""

from __future__ import annotations

from pathlib import Path

import trio

from orchestrator import (
    AgentClient,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolMessage,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.cluster import Worker
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.store.runs import NewInboxItem
from orchestrator.store.runs_sql import sqlite_run_store
from orchestrator.wire.format import encode_message
from tests.cluster.waits import until_final, until_parked
from tests.support import asks, call

RELEASE: dict[str, trio.Event] = {}


@tool
async def hold() -> str:
    """Hold this run's slot until the test lets it go."""
    await RELEASE["event"].wait()
    return "let go"


def _step(request: ModelRequest) -> AssistantMessage:
    first = next(m for m in request.messages if isinstance(m, UserMessage)).text
    if any(isinstance(m, ToolMessage) for m in request.messages):
        return AssistantMessage("done")
    if first == "ask":
        return asks(call("q1", "ask_user", question="Go on?", options=["yes", "no"]))
    return asks(call("h1", "hold"))


async def _agent() -> AgentClient:
    return await create_agent(ScriptedModel([_step], repeat_last=True), tools=[hold], extensions=[AskUserExtension()])


async def test_an_answered_run_takes_a_reserved_slot_while_new_runs_fill_the_others(tmp_path: Path) -> None:
    RELEASE["event"] = trio.Event()
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    worker = Worker(await _agent(), store, name="w", capacity=2, resume_reserve=1, poll_seconds=0.05)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            store.create_run("s-ask", "ask", encode_message(UserMessage("ask")))
            call_id = await until_parked(store, "ask")
            for index in range(3):
                store.create_run(f"s-new{index}", f"new{index}", encode_message(UserMessage("hold")))
            while not any(r.status == "running" for r in store.runs() if r.request_id.startswith("new")):
                await trio.sleep(0.02)
            await trio.sleep(0.3)  # the worker has had every chance to claim more new runs
            running = sorted(r.request_id for r in store.runs() if r.status == "running")
            assert running == ["new0"], running  # one slot is kept for a run that ran before
            store.post(NewInboxItem("s-ask", "ask", "ask_user_response", {"tool_call_id": call_id, "answer": "yes"}))
            with trio.move_on_after(10) as waited:
                assert await until_final(store, "ask") == "completed"
            assert not waited.cancelled_caught, "the answered run waited for a slot behind new runs"
            assert {r.request_id: r.status for r in store.runs()}["new1"] == "queued"  # still held back
            RELEASE["event"].set()
            for index in range(3):
                assert await until_final(store, f"new{index}") == "completed"
            nursery.cancel_scope.cancel()
    store.close()

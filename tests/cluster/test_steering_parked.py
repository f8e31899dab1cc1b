"""Steering a parked run through a web node: it is taken, the run goes on waiting for its answer, and the
message is applied as the next turn once the waiting call has its result, exactly as in one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolCall, create_agent, tool
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.extensions.steering import SteeringExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.store.runs_sql import sqlite_run_store
from tests.server.support import read_sse

RAN: list[int] = []


@tool
async def refund(order: int) -> str:
    """Refund an order.

    Args:
        order: the order's number
    """
    RAN.append(order)
    return f"order {order} refunded"


def support(request: ModelRequest) -> AssistantMessage:
    last = request.messages[-1]
    if last.role == "user" and "refund" in last.text:
        return AssistantMessage("", (ToolCall("c1", "refund", {"order": 42}),))
    return AssistantMessage(f"Answering {last.role}: {last.text if last.role == 'user' else last.content}")


async def agent() -> Any:
    return await create_agent(
        ScriptedModel([support], repeat_last=True),
        tools=[refund],
        extensions=[ToolApprovalExtension({"refund": "ask"}), SteeringExtension()],
    )


@pytest.mark.parametrize("worker_restarts", [False, True])
async def test_steering_a_parked_run_is_applied_as_the_next_turn_after_its_answer(
    tmp_path: Path, worker_restarts: bool
) -> None:
    RAN.clear()
    path = str(tmp_path / "runs.db")
    events: list[dict[str, Any]] = []
    with trio.fail_after(30):
        async with httpx.AsyncClient(timeout=10) as http, trio.open_nursery() as nursery:
            worker = Worker(await agent(), sqlite_run_store(path), name="w1", poll_seconds=0.05, lease_seconds=1.0)
            worker_scope = trio.CancelScope()

            async def carry(w: Worker, scope: trio.CancelScope) -> None:
                with scope:
                    await w.run()

            nursery.start_soon(carry, worker, worker_scope)
            from tests.server.support import serving

            async with serving(StoreBackend(sqlite_run_store(path), poll_seconds=0.02)) as base:  # type: ignore[arg-type]
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "refund please"})
                request_id = started.json()["request_id"]
                parked = await read_sse(http, f"{base}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked")
                steered = await http.post(
                    f"{base}/sessions/s1/events", json={"name": "steering_message", "payload": {"content": "and say sorry"}}
                )
                assert steered.status_code == 202, steered.text
                if worker_restarts:
                    # The worker that took the steering message is gone, writing nothing more (a cancelled task
                    # would end the run it carries cancelled, if it had resumed it by now).
                    worker.stop_now()
                    worker_scope.cancel()
                    await trio.sleep(0.3)
                    nursery.start_soon(carry, Worker(await agent(), sqlite_run_store(path), name="w2", poll_seconds=0.05, lease_seconds=1.0), trio.CancelScope())
                await trio.sleep(0.5)
                assert RAN == []  # the call still waits for its answer
                pending = (await http.get(f"{base}/sessions/s1")).json()["pending"]
                assert [p["tool_call_id"] for p in pending] == ["c1"]
                approved = await http.post(
                    f"{base}/sessions/s1/events",
                    json={"name": "tool_approval_response", "payload": {"tool_call_id": "c1", "approved": True}},
                )
                assert approved.status_code == 202, approved.text
                rest = await read_sse(http, f"{base}/runs/{request_id}/events", last_event_id=parked.events[-1]["seq"])
                events = parked.events + rest.events
            nursery.cancel_scope.cancel()
    types = [e["type"] for e in events]
    print([t for t in types if t != "transition"], events[-1].get("result"))
    assert types[-1] == "run_completed", types
    assert RAN == [42]
    assert types.index("steering_applied") > types.index("tool_completed")
    assert events[-1]["result"]["content"] == "Answering user: and say sorry"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))

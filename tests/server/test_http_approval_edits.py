"""Approval answers that edit the call's arguments, over a real loopback socket: a bad edit is a 409 with its reason."""

from __future__ import annotations

from typing import Any

import httpx
import trio

from orchestrator import AssistantMessage, ScriptedModel, create_agent, tool
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from tests.server.support import read_sse, serving
from tests.support import asks, call

paid: list[int] = []


@tool
def pay(amount: int) -> str:
    """Pay.

    Args:
        amount: euros
    """
    paid.append(amount)
    return f"paid {amount}"


async def test_an_edit_is_refused_with_its_reason_then_an_approval_with_edits_runs_them() -> None:
    model = ScriptedModel([asks(call("c1", "pay", amount=5000)), AssistantMessage("done")])
    client = await create_agent(model, tools=[pay], extensions=[ToolApprovalExtension({"pay": "ask"})])
    refusals: list[httpx.Response] = []
    async with httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(20):
            async with serving(client) as base:
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "pay"})
                assert started.status_code == 202, started.text

                async def approve(event: dict[str, Any]) -> None:
                    if event["type"] != "tool_approval":
                        return
                    url = f"{base}/sessions/s1/events"
                    answer = {"tool_call_id": "c1", "approved": True, "answered_by": "ada"}
                    bad = {"name": "tool_approval_response", "payload": {**answer, "arguments": {"amount": "x"}}}
                    refusals.append(await http.post(url, json=bad))
                    good = {"name": "tool_approval_response", "payload": {**answer, "arguments": {"amount": 50}}}
                    taken = await http.post(url, json=good)
                    assert taken.status_code == 202, taken.text

                got = await read_sse(http, f"{base}/runs/{started.json()['request_id']}/events", on_event=approve)
    (refused,) = refusals
    assert refused.status_code == 409
    assert refused.json()["refused"] == {
        "ToolApprovalExtension": "the edited arguments do not fit pay: amount: expected an integer, got 'x'"
    }
    assert paid == [50]
    (answered,) = [e for e in got.events if e["type"] == "tool_approval_answered"]
    assert (answered["answered_by"], answered["arguments"], answered["edited"]) == ("ada", {"amount": 50}, True)
    (completed,) = [e for e in got.events if e["type"] == "tool_completed"]
    assert completed["call"]["arguments"] == {"amount": 50}
    assert completed["result"]["approval"]["answered_by"] == "ada"

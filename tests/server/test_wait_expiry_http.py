"""Over HTTP: an approval nobody answers expires, the SSE stream says so, and a late answer is a 409."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ScriptedModel, create_agent, tool
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from tests.server.support import read_sse, serving
from tests.support import asks, call


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


async def test_an_expired_approval_is_in_the_sse_stream_and_a_late_answer_is_a_409(http: httpx.AsyncClient) -> None:
    ran: list[str] = []

    @tool
    def deploy() -> str:
        """Deploys."""
        ran.append("deploy")
        return "deployed"

    model = ScriptedModel([asks(call("c1", "deploy")), AssistantMessage("Nobody approved; not deployed.")])
    approvals = ToolApprovalExtension({"deploy": "ask"}, expires_after=0.2)
    client = await create_agent(model, tools=[deploy], extensions=[approvals])
    with trio.fail_after(20):
        async with serving(client) as base:
            started = await http.post(f"{base}/sessions/s1/runs", json={"input": "deploy"})
            assert started.status_code == 202, started.text
            request_id = started.json()["request_id"]
            got = await read_sse(http, f"{base}/runs/{request_id}/events")
            late = await http.post(
                f"{base}/sessions/s1/events",
                json={"name": "tool_approval_response", "payload": {"tool_call_id": "c1", "approved": True}},
            )
    assert ran == []
    expired = [e for e in got.events if e["type"] == "wait_expired"]
    assert len(expired) == 1
    assert (expired[0]["tool_call_id"], expired[0]["outcome"]) == ("c1", "declined")
    assert got.types.index("tool_approval") < got.types.index("wait_expired")
    assert got.types[-1] == "run_completed"
    assert late.status_code == 409
    body = late.json()
    assert body["error"]["type"] == "EventRefused"
    assert body["refused"]["ToolApprovalExtension"] == "call tool_call_id='c1' expired: nobody answered it within 0.2 s"

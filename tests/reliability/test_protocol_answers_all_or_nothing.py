"""An AG-UI resume that answers two waiting calls, one of them wrongly, takes neither: each answer is checked
before any is delivered, so the run errs with the reason and both calls still wait."""

from __future__ import annotations

import httpx

from orchestrator import AssistantMessage, ScriptedModel, create_agent, tool
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from tests.protocols.agui_support import agui_events, run_input
from tests.server.support import serving
from tests.support import asks, call


async def test_one_bad_answer_among_two_leaves_both_calls_waiting() -> None:
    ran: list[str] = []

    @tool
    async def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    model = ScriptedModel(
        [asks(call("c1", "delete_file", path="a"), call("c2", "delete_file", path="b")), AssistantMessage("ok")]
    )
    client = await create_agent(model, tools=[delete_file], extensions=[ToolApprovalExtension({"delete_file": "ask"})])
    async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
        first = await agui_events(http, base, run_input("both"))
        assert first[-1]["outcome"]["type"] == "interrupt" and len(first[-1]["outcome"]["interrupts"]) == 2
        one, two = first[-1]["outcome"]["interrupts"]
        resume = [
            {"interruptId": one["id"], "status": "resolved", "payload": {"approved": True}},
            {"interruptId": two["id"], "status": "resolved", "payload": {"approved": "yes"}},
        ]
        refused = await agui_events(http, base, run_input("both", resume=resume))
        assert refused[-1]["type"] == "RUN_ERROR" and refused[-1]["code"] == "AnswerRefused", refused[-1]
        assert "approved" in refused[-1]["message"]
        pending = (await http.get(f"{base}/sessions/both")).json()["pending"]
        assert sorted(p["tool_call_id"] for p in pending) == ["c1", "c2"]
        assert ran == []

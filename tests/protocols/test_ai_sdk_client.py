"""The `ai` package's chat and UI message stream reader (node) through approve, deny and ask_user cycles."""

from __future__ import annotations

from typing import Any

from tests.protocols.agui_support import Ledger, approval_client, ask_user_client
from tests.protocols.node_clients import run_client
from tests.server.support import Serving


def text_of(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


def tool_part(message: dict[str, Any], call_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in message["parts"] if p.get("toolCallId") == call_id)
    return found


async def test_an_approved_call_runs_and_the_answer_streams_on(serving: Serving) -> None:
    ledger = Ledger()
    async with serving(await approval_client(ledger)) as base:
        got = await run_client("ai", "ai_chat_cycle.mjs", base, "approve", "ai-approve")
    assert got["errors"] == [] and got["status"] == "ready"
    [asked] = got["asked"]
    assert asked["state"] == "approval-requested" and asked["toolName"] == "delete_file"
    assistant = got["messages"][-1]
    assert tool_part(assistant, "c1")["state"] == "output-available"
    assert tool_part(assistant, "c1")["output"] == "deleted a.txt"
    assert text_of(assistant).endswith("Tool said: deleted a.txt")
    assert ledger.deleted == ["a.txt"]


async def test_a_denied_call_never_runs_and_is_shown_denied(serving: Serving) -> None:
    ledger = Ledger()
    async with serving(await approval_client(ledger)) as base:
        got = await run_client("ai", "ai_chat_cycle.mjs", base, "deny", "ai-deny")
    assert got["errors"] == [] and got["status"] == "ready"
    assistant = got["messages"][-1]
    assert tool_part(assistant, "c1")["state"] == "output-denied"
    assert "rejected" in text_of(assistant)
    assert ledger.deleted == []


async def test_an_ask_user_question_takes_the_tool_output_the_client_supplies(serving: Serving) -> None:
    async with serving(await ask_user_client()) as base:
        got = await run_client("ai", "ai_chat_cycle.mjs", base, "ask", "ai-ask")
    assert got["errors"] == [] and got["status"] == "ready"
    assert got["asked"][0]["state"] == "input-available" and got["asked"][0]["input"]["question"] == "Which colour?"
    assert text_of(got["messages"][-1]).endswith("You chose blue.")

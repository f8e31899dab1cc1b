"""@ag-ui/client's HttpAgent (node) drives approve, decline and ask_user cycles to completion, on each host."""

from __future__ import annotations

from tests.protocols.agui_support import Ledger, approval_client, ask_user_client
from tests.protocols.node_clients import run_client
from tests.server.support import Serving


async def test_the_client_approves_a_tool_call_and_the_run_completes(serving: Serving) -> None:
    ledger = Ledger()
    async with serving(await approval_client(ledger)) as base:
        got = await run_client("@ag-ui/client", "agui_cycle.mjs", base, "approve", "c-approve")
    [interrupt] = got["interrupts"]
    assert interrupt["toolCallId"] == "c1"
    assert got["result"] == "Tool said: deleted a.txt" and got["pending"] == []
    assert ledger.deleted == ["a.txt"]
    tool = next(m for m in got["messages"] if m["role"] == "tool")
    assert tool["toolCallId"] == "c1" and tool["content"] == "deleted a.txt"


async def test_the_client_declines_a_tool_call_and_it_never_runs(serving: Serving) -> None:
    ledger = Ledger()
    async with serving(await approval_client(ledger)) as base:
        got = await run_client("@ag-ui/client", "agui_cycle.mjs", base, "decline", "c-decline")
    assert got["result"].startswith("Tool said: rejected") and got["pending"] == []
    assert ledger.deleted == []


async def test_the_client_answers_an_ask_user_question(serving: Serving) -> None:
    async with serving(await ask_user_client()) as base:
        got = await run_client("@ag-ui/client", "agui_cycle.mjs", base, "ask", "c-ask")
    assert got["interrupts"][0]["message"] == "Which colour?"
    assert got["result"] == "You chose blue." and got["pending"] == []

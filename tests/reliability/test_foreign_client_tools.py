"""An AG-UI run refused for another principal's thread declares none of its frontend tools in that thread: the
ownership check comes before the declaration, which the owner's next request would otherwise be offered."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
import trio

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.extensions.client_tools import ClientToolsExtension
from tests.protocols.agui_support import agui_events, run_input
from tests.server.support import serving

KEYS = {"Bearer a": "alice", "Bearer b": "bob"}


def by_key(headers: Mapping[str, str]) -> str | None:
    return KEYS.get(headers.get("authorization", ""))


def tool(name: str) -> dict[str, object]:
    return {"name": name, "description": f"{name} on the page", "parameters": {"type": "object", "properties": {}}}


async def test_another_principals_frontend_tools_are_not_declared_in_a_thread() -> None:
    tools = ClientToolsExtension()
    client = await create_agent(ScriptedModel([AssistantMessage("hi")], repeat_last=True), extensions=[tools])
    with trio.fail_after(30):
        async with serving(client, authenticate=by_key) as base, httpx.AsyncClient(timeout=10) as http:
            http.headers["Authorization"] = "Bearer a"
            mine = await agui_events(http, base, run_input("t1", "hello", tools=[tool("highlight")]))
            assert mine[-1]["type"] == "RUN_FINISHED"
            http.headers["Authorization"] = "Bearer b"
            theirs = await agui_events(http, base, run_input("t1", "hello", tools=[tool("wipe_page")]))
            assert theirs[-1]["type"] == "RUN_ERROR" and theirs[-1]["code"] == "NotFound"
    # The frontend tools of a run travel with that run (its metadata): the refused one left none in the thread.
    assert "wipe_page" not in [declared.name for declared in tools.declared("t1")]

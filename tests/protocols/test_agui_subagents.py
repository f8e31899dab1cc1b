"""A subagent's work over AG-UI: SUBAGENT_STARTED / SUBAGENT_FINISHED around the child's events, which carry
its ``subagentRunId``; a question inside the child suspends it, and the resume run continues it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import httpx
import pytest

from orchestrator import AgentClient, AssistantMessage, ScriptedModel, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.subagent import agent_tool
from orchestrator.server.protocols.agui import InterruptId
from tests.protocols.agui_support import agui_events, last_result, run_input
from tests.protocols.node_clients import run_client
from tests.server.support import Serving
from tests.support import asks, call

assert_valid_agui = pytest.importorskip(
    "ag_ui_validate.pytest_plugin", reason="ag-ui-validate is not installed (pip install -e '.[test]')"
).assert_valid_agui

@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


async def researcher_client() -> AgentClient:
    """The parent hands ``pick a colour`` to its ``research`` subagent, which asks the user, then answers."""
    child_model = ScriptedModel(
        [
            asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"]), text="Let me ask."),
            lambda request: AssistantMessage(f"The user picked {last_result(request)}."),
        ]
    )
    child = await create_agent(child_model, extensions=[AskUserExtension()])
    parent_model = ScriptedModel(
        [
            asks(call("r1", "research", task="pick a colour"), text="Asking my researcher."),
            lambda request: AssistantMessage(f"Research says: {last_result(request)}"),
        ]
    )
    return await create_agent(parent_model, extensions=[agent_tool(child, name="research", description="Research.")])


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


async def test_a_subagents_question_suspends_it_and_the_resume_run_continues_it_to_its_result(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    async with serving(await researcher_client()) as base:
        first = await agui_events(http, base, run_input("sub1"))
        assert_valid_agui(first)
        [started] = of(first, "SUBAGENT_STARTED")
        child = started["subagentRunId"]
        assert started["name"] == "research" and started["parentToolCallId"] == "r1"
        assert not [e for e in first if e["type"] == "CUSTOM" and e["name"].startswith("orchestrator.subagent_")]
        # the child's text and tool call carry its subagentRunId, the parent's none
        child_text = [e for e in of(first, "TEXT_MESSAGE_CONTENT") if e.get("subagentRunId") == child]
        assert "".join(e["delta"] for e in child_text) == "Let me ask."
        parent_text = [e for e in of(first, "TEXT_MESSAGE_CONTENT") if "subagentRunId" not in e]
        assert "".join(e["delta"] for e in parent_text) == "Asking my researcher."
        by_call = {e["toolCallId"]: e.get("subagentRunId") for e in of(first, "TOOL_CALL_START")}
        assert by_call == {"r1": None, "q1": child}
        # the child's phases are not the parent's state
        assert all("subagentRunId" not in e for e in of(first, "STATE_DELTA"))
        [interrupt] = first[-1]["outcome"]["interrupts"]
        assert interrupt["toolCallId"] == "q1" and interrupt["subagentRunId"] == child
        [suspended] = of(first, "SUBAGENT_FINISHED")
        assert suspended == {
            "type": "SUBAGENT_FINISHED",
            "subagentRunId": child,
            "outcome": {"type": "suspended", "interruptIds": [interrupt["id"]]},
        }

        # an id naming a child session where nothing waits, or that is no id of ours, is refused and changes nothing
        real = InterruptId.decode(interrupt["id"])
        forged = attrs.evolve(real, call_session_id="elsewhere:r1").encode()
        for bad in (forged, interrupt["id"][:-4]):
            entry = [{"interruptId": bad, "status": "resolved", "payload": {"answer": "blue"}}]
            refused = await agui_events(http, base, run_input("sub1", resume=entry))
            assert refused[-1]["type"] == "RUN_ERROR" and refused[-1]["code"] == "UnknownInterrupt", refused[-1]
        resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"answer": "blue"}}]
        second = await agui_events(http, base, run_input("sub1", resume=resume))
        assert_valid_agui(second)
        assert [e["subagentRunId"] for e in of(second, "SUBAGENT_STARTED")] == [child]
        result = next(e for e in of(second, "TOOL_CALL_RESULT") if e["toolCallId"] == "q1")
        assert result["subagentRunId"] == child and result["content"] == "blue"
        [finished] = of(second, "SUBAGENT_FINISHED")
        assert finished["outcome"] == {"type": "success"} and finished["result"] == "The user picked blue."
        assert second[-1]["type"] == "RUN_FINISHED" and second[-1]["result"] == "Research says: The user picked blue."
        # the snapshot states the child's messages so far, attributed to it, after the parent's call
        snapshot = of(second, "MESSAGES_SNAPSHOT")[0]["messages"]
        owners = [(m["role"], m.get("subagentRunId")) for m in snapshot]
        assert owners[-3:] == [("assistant", None), ("user", child), ("assistant", child)], snapshot
        assert snapshot[-1]["toolCalls"][0]["id"] == "q1"


async def test_a_failed_subagent_is_a_subagent_error_and_the_parent_run_goes_on(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    def broken(request: object) -> AssistantMessage:
        raise RuntimeError("the researcher broke")

    child = await create_agent(ScriptedModel([broken]))
    parent_model = ScriptedModel(
        [
            asks(call("r1", "research", task="anything")),
            lambda request: AssistantMessage(f"Noted: {last_result(request)}"),
        ]
    )
    parent = await create_agent(parent_model, extensions=[agent_tool(child, name="research", description="R.")])
    async with serving(parent) as base:
        events = await agui_events(http, base, run_input("sub2"))
    assert_valid_agui(events)
    [started] = of(events, "SUBAGENT_STARTED")
    [error] = of(events, "SUBAGENT_ERROR")
    assert error["subagentRunId"] == started["subagentRunId"] and error["code"] == "SubagentFailed"
    assert "the researcher broke" in error["message"]
    assert events[-1]["type"] == "RUN_FINISHED" and "the researcher broke" in events[-1]["result"]


async def test_the_agui_client_answers_a_subagents_question_and_gets_the_parents_answer(serving: Serving) -> None:
    async with serving(await researcher_client()) as base:
        got = await run_client("@ag-ui/client", "agui_cycle.mjs", base, "ask", "sub-js", "red")
    [interrupt] = got["interrupts"]
    assert interrupt["toolCallId"] == "q1" and interrupt["subagentRunId"]
    assert got["result"] == "Research says: The user picked red." and got["pending"] == []
    assert got["types"].count("SUBAGENT_STARTED") == 2 and got["types"].count("SUBAGENT_FINISHED") == 2
    child = [m for m in got["messages"] if m.get("subagentRunId") == interrupt["subagentRunId"]]
    # the client keeps the child's messages (its question, its call, the answer, its reply) attributed to it
    assert sorted(m["role"] for m in child) == ["assistant", "assistant", "tool", "user"]

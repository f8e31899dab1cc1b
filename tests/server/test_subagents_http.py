"""A subagent's events reach the parent run's SSE stream, and its question is answered over POST."""

from __future__ import annotations

from typing import Any

import httpx
import trio

from orchestrator import AssistantMessage, ScriptedModel, agent_tool, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from tests.server.support import Serving, read_sse
from tests.support import asks, call


async def test_a_childs_question_streams_on_the_parent_run_and_is_answered_on_the_child_session(serving: Serving) -> None:
    child = await create_agent(
        ScriptedModel(
            [
                asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"])),
                AssistantMessage("blue it is"),
            ]
        ),
        extensions=[AskUserExtension()],
    )
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="pick a colour")), AssistantMessage("painted blue")]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    answered: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(20):
            async with serving(parent) as base:
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "paint"})
                assert started.status_code == 202, started.text
                request_id = started.json()["request_id"]

                async def reply(event: dict[str, Any]) -> None:
                    if event["type"] != "ask_user":
                        return
                    session = event["session_id"]
                    shown = (await http.get(f"{base}/sessions/s1")).json()
                    answered.append({"session": session, "pending": shown["pending"]})
                    response = await http.post(
                        f"{base}/sessions/{session}/events",
                        json={"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "blue"}},
                    )
                    assert response.status_code == 202, response.text
                    assert response.json() == {"accepted": ["subagent:research"]}

                got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=reply)
                trace = (await http.get(f"{base}/runs/{request_id}/trace")).text
    assert 'subgraph c1_machine["research r1 · session s1:r1"]' in trace
    assert '  phase__awaiting_tool -.->|"r1"| c1_machine' in trace
    assert parent.agent.child_traces("s1", "another request") == []
    assert [a["session"] for a in answered] == ["s1:r1"]
    waiting = answered[0]["pending"]  # the parent session lists its child's question
    assert [(p["session_id"], p["tool_call_id"], p["event"]) for p in waiting] == [("s1:r1", "q1", "ask_user")]
    assert got.types[-1] == "run_completed" and got.events[-1]["session_id"] == "s1"
    assert [int(i) for i, _, _ in got.frames] == list(range(1, len(got.frames) + 1))
    started_event = next(e for e in got.events if e["type"] == "subagent_started")
    assert (started_event["tool_call_id"], started_event["child_session_id"]) == ("r1", "s1:r1")
    child_events = [e for e in got.events if e["session_id"] == "s1:r1"]
    assert {e["request_id"] for e in child_events} == {started_event["child_request_id"]}
    assert child_events[-1]["type"] == "run_completed"
    completed = next(e for e in got.events if e["type"] == "subagent_completed")
    assert (completed["outcome"], completed["result"]) == ("completed", "blue it is")

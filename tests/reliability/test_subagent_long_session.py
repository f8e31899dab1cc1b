"""A subagent of a long-named session gets a child session id that fits the HTTP service's id limit.

A child session id is the parent's id and the tool call id joined; for a long
parent that would exceed the limit of a URL path id, so the child's question
could not be answered over HTTP and the run would wait forever. Such a child
gets a shortened id ending in a digest of both: stable, distinct per child, and
within the limit, so its question is answered on its session like any other.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ScriptedModel, agent_tool, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.subagent import child_session_id
from orchestrator.server.ids import MAX_ID_LENGTH
from tests.server.support import read_sse, serving
from tests.support import asks, call

PARENT = "project-" + "x" * 182  # 190 characters
CALL_ID = "toolu_01D7FLrfh4GYq7yT1ULFeyMV"  # 30 characters, as a provider makes them


def test_a_child_id_always_fits_the_limit_and_names_one_child() -> None:
    from orchestrator.extensions.subagent import CHILD_SESSION_ID_LIMIT

    assert CHILD_SESSION_ID_LIMIT == MAX_ID_LENGTH
    assert child_session_id("s1", "r1") == "s1:r1"  # short ids stay readable
    ids = set()
    for parent in ("s", PARENT, "y" * 200, "z" * 5000, PARENT + "a", PARENT + "b"):
        for call_id in ("r1", CALL_ID, "c" * 400, "a/b c", "~x"):
            derived = child_session_id(parent, call_id)
            assert 1 <= len(derived) <= CHILD_SESSION_ID_LIMIT, (parent, call_id)
            assert derived == child_session_id(parent, call_id)  # stable
            ids.add(derived)
    assert len(ids) == 6 * 5  # one id per (parent, call) pair
    nested = child_session_id(child_session_id(PARENT, CALL_ID), CALL_ID)
    assert len(nested) <= CHILD_SESSION_ID_LIMIT and nested != child_session_id(PARENT, CALL_ID)


@pytest.mark.parametrize("parent_session", [PARENT, "p" * MAX_ID_LENGTH])
async def test_the_question_of_a_child_of_a_long_named_session_is_answered_over_http(parent_session: str) -> None:
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
        ScriptedModel([asks(call(CALL_ID, "research", task="pick a colour")), AssistantMessage("painted blue")]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    answers: list[tuple[str, int, Any]] = []
    async with httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(20):
            async with serving(parent) as base:
                started = await http.post(f"{base}/sessions/{parent_session}/runs", json={"input": "paint"})
                assert started.status_code == 202, started.text
                request_id = started.json()["request_id"]

                async def reply(event: dict[str, Any]) -> None:
                    if event["type"] != "ask_user":
                        return
                    session = event["session_id"]
                    response = await http.post(
                        f"{base}/sessions/{session}/events",
                        json={"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "blue"}},
                    )
                    answers.append((session, response.status_code, response.json()))

                got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=reply)
    started_event = next(e for e in got.events if e["type"] == "subagent_started")
    child_session = started_event["child_session_id"]
    assert child_session == child_session_id(parent_session, CALL_ID)
    assert len(child_session) <= MAX_ID_LENGTH
    assert answers == [(child_session, 202, {"accepted": ["subagent:research"]})]
    completed = next(e for e in got.events if e["type"] == "subagent_completed")
    assert (completed["outcome"], completed["result"]) == ("completed", "blue it is")
    assert got.types[-1] == "run_completed" and got.events[-1]["session_id"] == parent_session

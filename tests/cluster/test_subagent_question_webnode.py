"""A subagent's question in a run carried by a worker, answered through a web node on the child's session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from orchestrator import AssistantMessage, ScriptedModel, agent_tool, create_agent
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.store.runs_sql import sqlite_run_store
from tests.server.support import read_sse, serving
from tests.support import asks, call


async def parent_agent() -> Any:
    child = await create_agent(
        ScriptedModel(
            [
                asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"])),
                AssistantMessage("blue it is"),
            ]
        ),
        extensions=[AskUserExtension()],
    )
    return await create_agent(
        ScriptedModel([asks(call("r1", "research", task="pick a colour")), AssistantMessage("painted blue")]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )


async def test_a_childs_question_is_answered_through_a_web_node(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    answers: list[int] = []
    with trio.fail_after(30):
        async with httpx.AsyncClient(timeout=10) as http, trio.open_nursery() as nursery:
            await nursery.start(Worker(await parent_agent(), sqlite_run_store(path), name="w", poll_seconds=0.05).run)
            async with serving(StoreBackend(sqlite_run_store(path), poll_seconds=0.02)) as base:  # type: ignore[arg-type]
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "paint"})
                request_id = started.json()["request_id"]

                async def reply(event: dict[str, Any]) -> None:
                    if event["type"] != "ask_user":
                        return
                    pending = (await http.get(f"{base}/sessions/s1")).json()["pending"]
                    assert [(p["session_id"], p["tool_call_id"]) for p in pending] == [("s1:r1", "q1")]
                    wrong = await http.post(
                        f"{base}/sessions/{event['session_id']}/events",
                        json={"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "green"}},
                    )
                    assert wrong.status_code == 409 and "one of" in wrong.text, wrong.text
                    unknown = await http.post(
                        f"{base}/sessions/s1:nobody/events",
                        json={"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "blue"}},
                    )
                    assert unknown.status_code == 409, unknown.text
                    response = await http.post(
                        f"{base}/sessions/{event['session_id']}/events",
                        json={"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "blue"}},
                    )
                    answers.append(response.status_code)

                got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=reply)
            nursery.cancel_scope.cancel()
    child = [e["type"] for e in got.events if e["session_id"] == "s1:r1" and e["type"] != "transition"]
    assert child.count("ask_user") == 1 and child[-1] == "run_completed"
    completed = next(e for e in got.events if e["type"] == "subagent_completed")
    assert completed["result"] == "blue it is"
    assert answers == [202]
    assert got.types[-1] == "run_completed"
    assert got.events[-1]["result"]["content"] == "painted blue"

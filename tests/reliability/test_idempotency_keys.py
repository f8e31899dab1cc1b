"""Idempotency keys hold across overlapping requests, nodes and sessions.

- the route's key is reserved before the route acts: 20 overlapping POSTs with one key apply once;
- a run store's inbox key is held to its first body on every node: another body is a 422;
- the console's answer key names one question, so a later question that reuses a call id gets a new key.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    create_agent,
    tool,
)
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.config import ExternalEvent
from orchestrator.extensions.steering import SteeringExtension
from orchestrator.store.runs_sql import sqlite_run_store
from tests.server.support import read_sse, serving
from tests.support import asks, call

CONSOLE = Path(__file__).resolve().parents[2] / "orchestrator" / "server" / "static" / "console.js"


async def test_twenty_overlapping_steering_posts_with_one_key_apply_once() -> None:
    started = trio.Event()
    release = trio.Event()

    @tool
    async def slow() -> str:
        """Work until released."""
        started.set()
        await release.wait()
        return "done"

    def answer(request: ModelRequest) -> AssistantMessage:
        steered = [m.text for m in request.messages if m.role == "user"]
        return AssistantMessage(f"Heard {len(steered)} user messages.")

    class Tally(AgentExtension):
        """The application's record of every steering message its agent was handed (it takes a while)."""

        def __init__(self) -> None:
            self.handed: list[Any] = []

        def consider(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
            if event.name == "steering_message":
                self.handed.append(event.payload)
                time.sleep(0.3)  # deliveries run in a thread: a slow one overlaps the next request
            return False

    tally = Tally()
    model = ScriptedModel([asks(call("t1", "slow")), answer], repeat_last=True)
    client = await create_agent(model, tools=[slow], extensions=[SteeringExtension(), tally])
    body = {"name": "steering_message", "payload": {"content": "also do this"}}
    with trio.fail_after(30):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            started_run = await http.post(f"{base}/sessions/s1/runs", json={"input": "work"})
            request_id = started_run.json()["request_id"]
            await started.wait()
            replies: list[httpx.Response] = []

            async def post() -> None:
                replies.append(
                    await http.post(f"{base}/sessions/s1/events", json=body, headers={"Idempotency-Key": "steer-1"})
                )

            async with trio.open_nursery() as nursery:
                for _ in range(20):
                    nursery.start_soon(post)
            release.set()
            got = await read_sse(http, f"{base}/runs/{request_id}/events")
            session = (await http.get(f"{base}/sessions/s1")).json()
    assert {(r.status_code, r.text) for r in replies} == {(202, replies[0].text)}, [r.text for r in replies]
    assert len(tally.handed) == 1, f"one key acted {len(tally.handed)} times"
    assert got.types.count("steering_accepted") == 1, got.types
    steered = [m for m in session["messages"] if m["role"] == "user" and "also do this" in json.dumps(m)]
    assert len(steered) == 1


async def test_one_key_with_another_body_on_another_web_node_is_a_422(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    sqlite_run_store(path).create_run("s1", "r1", {"role": "user", "content": "work"})
    first = {"name": "steering_message", "payload": {"content": "left"}}
    other = {"name": "steering_message", "payload": {"content": "right"}}
    headers = {"Idempotency-Key": "k-1"}
    with trio.fail_after(30):
        async with (
            serving(StoreBackend(sqlite_run_store(path))) as node_a,  # type: ignore[arg-type]
            serving(StoreBackend(sqlite_run_store(path))) as node_b,  # type: ignore[arg-type]
            httpx.AsyncClient(timeout=10) as http,
        ):
            accepted = await http.post(f"{node_a}/sessions/s1/events", json=first, headers=headers)
            reused = await http.post(f"{node_b}/sessions/s1/events", json=other, headers=headers)
            retried = await http.post(f"{node_b}/sessions/s1/events", json=first, headers=headers)
    assert accepted.status_code == 202, accepted.text
    assert reused.status_code == 422, reused.text
    assert reused.json()["error"]["type"] == "IdempotencyKeyReused"
    assert retried.status_code == 202, retried.text
    inbox = sqlite_run_store(path).inbox("r1")
    assert [item.payload["content"] for item in inbox] == ["left"]


def _console_key(request_id: str, event: dict[str, Any], payload: dict[str, Any]) -> str:
    source = CONSOLE.read_text()
    start = source.index("function answerKey(")
    end = source.index("\n}\n", start) + 3
    arguments = ", ".join(json.dumps(value) for value in (request_id, event, payload))
    program = source[start:end] + f"console.log(answerKey({arguments}));"
    try:
        done = subprocess.run(["node", "-e", program], capture_output=True, text=True, timeout=30, check=True)
    except FileNotFoundError:
        pytest.skip("node is not installed: the console's key function cannot be run")
    return done.stdout.strip()


def test_the_console_gives_a_later_question_reusing_a_call_id_a_new_answer_key() -> None:
    question = {"tool_call_id": "call_0", "seq": 4, "response_event": "tool_approval_response"}
    payload = {"approved": True}
    first = _console_key("r1", question, payload)
    assert first == _console_key("r1", question, payload), "a retried click must send the same key"
    assert _console_key("r2", question, payload) != first, "the next request's call_0 got the same key"
    assert _console_key("r1", {**question, "seq": 9}, payload) != first, "a later turn's call_0 got the same key"
    assert _console_key("r1", question, {"approved": False}) != first
    assert 0 < len(first) <= 200

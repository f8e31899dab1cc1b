"""Agents and a reader for the AG-UI tests."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from orchestrator import AgentClient, AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from tests.support import asks, call


def last_result(request: ModelRequest) -> str:
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    return results[-1].content if results else ""


class Ledger:
    """What the guarded tool really did."""

    def __init__(self) -> None:
        self.deleted: list[str] = []


async def approval_client(ledger: Ledger) -> AgentClient:
    """delete_file needs the user's approval; the model then says what the tool answered."""

    @tool
    async def delete_file(path: str) -> str:
        """Delete a file."""
        ledger.deleted.append(path)
        return f"deleted {path}"

    model = ScriptedModel(
        [
            asks(call("c1", "delete_file", path="a.txt"), text="I will delete a.txt."),
            lambda request: AssistantMessage(f"Tool said: {last_result(request)}"),
        ]
    )
    return await create_agent(model, tools=[delete_file], extensions=[ToolApprovalExtension({"delete_file": "ask"})])


async def ask_user_client() -> AgentClient:
    model = ScriptedModel(
        [
            asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"])),
            lambda request: AssistantMessage(f"You chose {last_result(request)}."),
        ]
    )
    return await create_agent(model, extensions=[AskUserExtension()])


def run_input(thread: str, text: str = "go", **more: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "state": {},
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **more,
    }


async def agui_events(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The AG-UI events of one run (its SSE ``data`` lines), read to the end."""
    events: list[dict[str, Any]] = []
    async with http.stream("POST", f"{base}/ag-ui", json=body, headers={"Accept": "text/event-stream"}) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            while "\n\n" in buffer:
                frame, buffer = buffer.split("\n\n", 1)
                for line in frame.splitlines():
                    if line.startswith("data:"):
                        events.append(json.loads(line[5:]))
    return events


CLIENT_TOOL = {
    "name": "confirm_colour",
    "description": "Show the colour to the user and return what they confirmed.",
    "parameters": {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]},
}


async def client_tool_client() -> AgentClient:
    """Calls the client's ``confirm_colour`` tool, then says what it returned."""
    from orchestrator.extensions.client_tools import ClientToolsExtension

    def first(request: ModelRequest) -> AssistantMessage:
        offered = [t.name for t in request.tools]
        assert "confirm_colour" in offered, offered
        return asks(call("f1", "confirm_colour", colour="blue"))

    model = ScriptedModel([first, lambda request: AssistantMessage(f"The client said: {last_result(request)}")])
    return await create_agent(model, extensions=[ClientToolsExtension()])


@asynccontextmanager
async def web_node(client: AgentClient, target: str) -> AsyncIterator[str]:
    """A web node and one worker carrying ``client``'s runs over the run store at ``target`` (a SQLite file or a
    PostgreSQL DSN); yields the web node's base URL."""
    from orchestrator.cluster import Worker
    from orchestrator.cluster.webnode import StoreBackend
    from orchestrator.store.runs_sql import postgres_run_store, sqlite_run_store
    from tests.server.support import serving

    def store() -> Any:
        return postgres_run_store(target) if target.startswith("postgresql") else sqlite_run_store(target)

    worker_store, node_store = store(), store()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(Worker(client, worker_store, name="w", poll_seconds=0.05).run)
            async with serving(StoreBackend(node_store, poll_seconds=0.02)) as base:
                yield base
            nursery.cancel_scope.cancel()
    finally:
        worker_store.close()
        node_store.close()


def turn_asker(request: ModelRequest) -> AssistantMessage:
    """Each request asks once which way to go (a call id of its own), then says what it was told."""
    since = len(request.messages) - next(i for i, m in enumerate(reversed(request.messages)) if m.role == "user") - 1
    user = request.messages[since].text
    answers = [m for m in request.messages[since:] if isinstance(m, ToolMessage)]
    if not answers:
        return asks(call(f"q{since}", "ask_user", question=f"Go on with {user}?", options=["yes", "no"]))
    return AssistantMessage(f"Done with {user}: {answers[-1].content}.")


async def turn_asker_client() -> AgentClient:
    return await create_agent(ScriptedModel([turn_asker], repeat_last=True), extensions=[AskUserExtension()])

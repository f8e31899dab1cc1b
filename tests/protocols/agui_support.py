"""Agents and a reader for the AG-UI tests."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

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

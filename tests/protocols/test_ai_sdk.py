"""POST /ai-sdk/chat over the wire: the stream's header and chunks, and bad input refused with a reason."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.protocols.agui_support import ask_user_client
from tests.server.support import Serving


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def user(text: str) -> dict[str, Any]:
    return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}


async def chunks(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> list[Any]:
    async with http.stream("POST", f"{base}/ai-sdk/chat", json=body) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert response.headers["content-type"].startswith("text/event-stream")
        text = (await response.aread()).decode()
    found = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
    assert found[-1] == "[DONE]"
    return [json.loads(item) for item in found[:-1]]


def answered(message: dict[str, Any], output: Any) -> dict[str, Any]:
    part = {
        "type": "dynamic-tool",
        "toolName": "ask_user",
        "toolCallId": "q1",
        "state": "output-available",
        "input": {},
        "output": output,
    }
    return {**message, "parts": [*message["parts"], part]}


async def test_a_question_ends_the_stream_and_bad_answers_leave_it_waiting(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    async with serving(await ask_user_client()) as base:
        first = await chunks(http, base, {"id": "chat1", "messages": [user("go")], "trigger": "submit-message"})
        types = [c["type"] for c in first]
        assert types[0] == "start" and "tool-input-available" in types and types[-1] == "finish"
        metadata = first[-1]["messageMetadata"]
        assistant = {"id": first[0]["messageId"], "role": "assistant", "parts": [], "metadata": metadata}

        wrong = await http.post(
            f"{base}/ai-sdk/chat", json={"id": "chat1", "messages": [user("go"), answered(assistant, "green")]}
        )
        assert wrong.status_code == 422 and wrong.json()["error"]["type"] == "AnswerRefused"
        typed = await http.post(
            f"{base}/ai-sdk/chat", json={"id": "chat1", "messages": [user("go"), answered(assistant, 7)]}
        )
        assert typed.status_code == 422 and "string" in typed.json()["error"]["message"]
        other = await http.post(
            f"{base}/ai-sdk/chat", json={"id": "other", "messages": [user("go"), answered(assistant, "red")]}
        )
        assert other.status_code == 404 and other.json()["error"]["type"] == "UnknownInterrupt"
        forged = answered(assistant, "red")
        forged["parts"][-1] = {
            **forged["parts"][-1],
            "state": "approval-responded",
            "approval": {"id": "x", "approved": True},
        }
        unknown = await http.post(f"{base}/ai-sdk/chat", json={"id": "chat1", "messages": [user("go"), forged]})
        assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "UnknownInterrupt"
        busy = await http.post(f"{base}/ai-sdk/chat", json={"id": "chat1", "messages": [user("again")]})
        assert busy.status_code == 409 and busy.json()["error"]["type"] == "SessionBusy"
        pending = (await http.get(f"{base}/sessions/chat1")).json()["pending"]
        assert [call["tool_call_id"] for call in pending] == ["q1"]

        rest = await chunks(http, base, {"id": "chat1", "messages": [user("go"), answered(assistant, "red")]})
        assert rest[0] == {"type": "start", "messageId": assistant["id"]}
        assert "".join(c["delta"] for c in rest if c["type"] == "text-delta") == "You chose red."
        assert rest[-1] == {"type": "finish", "finishReason": "stop"}


async def test_malformed_chat_bodies_are_refused_with_a_reason(serving: Serving, http: httpx.AsyncClient) -> None:
    async with serving(await ask_user_client(), max_body_bytes=2000) as base:
        url = f"{base}/ai-sdk/chat"
        malformed = await http.post(url, content=b"[1,", headers={"Content-Type": "application/json"})
        assert malformed.status_code == 400 and "not valid JSON" in malformed.json()["error"]["message"]
        assert (await http.post(url, json={"messages": [user("go")]})).status_code == 400
        empty = await http.post(url, json={"id": "c", "messages": []})
        assert empty.status_code == 400 and "messages" in empty.json()["error"]["message"]
        nothing = await http.post(url, json={"id": "c", "messages": [{"id": "a", "role": "assistant", "parts": []}]})
        assert nothing.status_code == 400 and "answers none" in nothing.json()["error"]["message"]
        assert (await http.post(url, json={"id": "c", "messages": [user("x" * 5000)]})).status_code == 413
        assert (await http.get(f"{base}/sessions/c")).status_code == 404


async def test_an_allowed_browser_origin_gets_a_preflight_and_the_route_is_documented(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    page = "http://chat.example:5173"
    async with serving(await ask_user_client(), allowed_origins=[page]) as base:
        preflight = await http.options(
            f"{base}/ai-sdk/chat",
            headers={
                "Origin": page,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == page
        document = (await http.get(f"{base}/openapi.json")).json()
        assert {"/ai-sdk/chat", "/ag-ui"} <= set(document["paths"])
        assert "422" in document["paths"]["/ai-sdk/chat"]["post"]["responses"]


async def test_a_client_that_aborts_the_stream_cancels_the_request(serving: Serving, http: httpx.AsyncClient) -> None:
    import trio

    from orchestrator import ScriptedModel, create_agent, tool
    from tests.support import asks, call

    @tool(loop="trio")
    async def slow(n: int) -> str:
        """Take a long time."""
        await trio.sleep(60)
        return "late"

    client = await create_agent(ScriptedModel([asks(call("s1", "slow", n=1))]), tools=[slow])
    async with serving(client) as base:
        seen = ""
        body = {"id": "abort", "messages": [user("go")]}
        async with http.stream("POST", f"{base}/ai-sdk/chat", json=body) as response:
            async for text in response.aiter_text():
                seen += text
                if "tool-input-available" in seen:
                    break
        request_id = json.loads(seen.split("\n\n")[0][6:])["messageId"].removesuffix(".a")
        with trio.fail_after(5):
            while not (view := (await http.get(f"{base}/runs/{request_id}")).json())["done"]:
                await trio.sleep(0.05)
    assert view["state"] == "cancelled"

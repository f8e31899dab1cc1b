"""A model that breaks the contract ends the request with a ModelError, never a hang.

Tool-call ids must be non-empty strings (results and approval answers are keyed by them);
arguments that are not a JSON object travel in ``ToolCall.invalid_arguments``, never as a
made-up key inside ``arguments``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
from provider_mock import Server, sse
from support import unchecked

from orchestrator import AgentRunConfig, AssistantMessage, ScriptedModel, ToolCall, ToolMessage, create_agent, tool
from orchestrator.errors import ModelError
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent, TextDeltaEvent
from orchestrator.providers import AnthropicModel, OpenAIChatModel


class OneShot:
    """Streams the given events, then a second call answers plainly."""

    def __init__(self, *events: Any) -> None:
        self.events = events
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        if self.calls > 1:
            yield ResponseCompletedEvent(AssistantMessage("answered"))
            return
        for event in self.events:
            yield event


@pytest.mark.parametrize("bad_id", [7, None, 1.5, b"id", ""])
async def test_a_tool_call_id_that_is_not_a_non_empty_string_is_a_model_error(bad_id: Any) -> None:
    failures: list[BaseException] = []
    model = OneShot(
        ResponseCompletedEvent(
            AssistantMessage(
                "",
                [
                    unchecked(  # ToolCall(bad_id, ...) itself raises TypeError: as a hostile model could hand it over
                        ToolCall, id=bad_id, name="ask_user", arguments={"question": "Which?", "options": ["a", "b"]}
                    )
                ],
            )
        )
    )
    client = await create_agent(model, extensions=[AskUserExtension()])
    names: list[str] = []
    with trio.fail_after(10), pytest.raises(ModelError, match="id"):
        async for event in client.stream("go", config=AgentRunConfig("s")):
            names.append(event.name)
            if event.name == "run_failed":
                failures.append(event.payload["error"])
    assert "tool_started" not in names and "ask_user" not in names
    assert len(failures) == 1 and isinstance(failures[0], ModelError)


@pytest.mark.parametrize(
    "events",
    [
        (TextDeltaEvent(b"bytes"),),  # type: ignore[arg-type]
        (ResponseCompletedEvent("just text"),),  # type: ignore[arg-type]
        (ResponseCompletedEvent(AssistantMessage("", [unchecked(ToolCall, id="1", name=42, arguments={})])),),
    ],
    ids=["delta-not-text", "completed-not-a-message", "call-name-not-text"],
)
async def test_other_wrongly_typed_model_output_is_a_model_error(events: tuple[Any, ...]) -> None:
    client = await create_agent(OneShot(*events))
    with trio.fail_after(10), pytest.raises(ModelError):
        await client.run("go")


def openai_stream(arguments: str) -> httpx.Response:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        payload = {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(payload)}\n\n"

    start = {"index": 0, "id": "call_bad", "type": "function", "function": {"name": "lookup", "arguments": ""}}
    body = chunk({"role": "assistant", "content": None}) + chunk({"tool_calls": [start]})
    body += chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]})
    return sse(body + chunk({}, finish="tool_calls") + "data: [DONE]\n\n")


def openai_text(text: str) -> httpx.Response:
    payload = {"id": "x", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    return sse(f"data: {json.dumps(payload)}\n\ndata: [DONE]\n\n")


def anthropic_stream(arguments: str) -> httpx.Response:
    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    body = event("message_start", {"message": {"id": "m", "usage": {"input_tokens": 1, "output_tokens": 0}}})
    body += event(
        "content_block_start",
        {"index": 0, "content_block": {"type": "tool_use", "id": "toolu_bad", "name": "lookup", "input": {}}},
    )
    body += event("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", "partial_json": arguments}})
    body += event("content_block_stop", {"index": 0})
    body += event("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 1}})
    return sse(body + event("message_stop", {}))


def anthropic_text(text: str) -> httpx.Response:
    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    body = event("message_start", {"message": {"id": "m", "usage": {"input_tokens": 1, "output_tokens": 0}}})
    body += event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    body += event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}})
    body += event("content_block_stop", {"index": 0})
    body += event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})
    return sse(body + event("message_stop", {}))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("raw", ['{"city": "Par', "[1, 2]", '"Paris"'])
async def test_malformed_arguments_travel_in_their_own_field_never_as_an_argument(provider: str, raw: str) -> None:
    ran: list[str] = []

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        ran.append(city)
        return city

    if provider == "openai":
        server = Server(openai_stream(raw), openai_text("sorry"))
        model: Any = OpenAIChatModel("m", api_key="k", client=server.client())
    else:
        server = Server(anthropic_stream(raw), anthropic_text("sorry"))
        model = AnthropicModel("m", api_key="k", client=server.client())
    client = await create_agent(model, tools=[lookup])
    with trio.fail_after(10):
        events = [e async for e in client.stream("find Paris", config=AgentRunConfig("s"))]
    assert ran == []
    [started] = [e for e in events if e.name == "tool_started"]
    call = started.payload["call"]
    assert call.arguments == {} and call.invalid_arguments == raw
    [failed] = [e for e in events if e.name == "tool_failed"]
    assert "not a valid JSON object" in failed.payload["result"].content and raw in failed.payload["result"].content
    for event in events:
        assert "__" not in repr(event.payload.get("call", "")), "no internal key reaches an event"
    body = json.dumps(server.bodies()[1])
    assert "__malformed" not in body


async def test_a_huge_invalid_argument_text_is_quoted_only_in_part() -> None:
    raw = "{" + "x" * 100_000
    model = ScriptedModel(
        [AssistantMessage("", [ToolCall("1", "noop", {}, raw)]), AssistantMessage("ok")], repeat_last=False
    )

    @tool
    def noop() -> str:
        """Nothing."""
        return ""

    client = await create_agent(model, tools=[noop])
    with trio.fail_after(10):
        await client.run("go")
    [result] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert result.status == "failed" and len(result.content) < 3000 and "100001 characters" in result.content


def test_invalid_arguments_survive_the_wire_format_and_the_sqlite_codec() -> None:
    from orchestrator import wire
    from orchestrator.extensions import sqlite_store

    message = AssistantMessage("", [ToolCall("1", "lookup", {}, '{"city": "Par'), ToolCall("2", "lookup", {"a": 1})])
    assert wire.decode_message(wire.encode_message(message)) == message
    assert "invalid_arguments" not in wire.encode_message(message)["tool_calls"][1]
    assert sqlite_store.decode_message(sqlite_store.encode_message(message)) == message
    legacy_call = {"id": "1", "name": "t", "arguments": {"__malformed_arguments__": "{"}}
    legacy = json.dumps({"role": "assistant", "content": "", "tool_calls": [legacy_call]})
    assert sqlite_store.decode_message(legacy) == AssistantMessage("", [ToolCall("1", "t", {}, "{")])


async def test_arguments_nested_too_deeply_are_a_model_error_and_cycles_are_left_to_the_store() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100_000):
        node["x"] = {}
        node = node["x"]
    client = await create_agent(OneShot(ResponseCompletedEvent(AssistantMessage("", [ToolCall("1", "t", deep)]))))
    with trio.fail_after(10), pytest.raises(ModelError, match="nested too deeply"):
        await client.run("go")

    from orchestrator.text import clean_value

    circular: dict[str, Any] = {"name": "\udcff"}
    circular["self"] = circular
    cleaned = clean_value(circular)
    assert cleaned["name"] == "\ufffd" and cleaned["self"] is circular

"""OpenAIResponsesModel against recorded-style Responses API streams on a mock transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from provider_mock import Server, Sleeps, collect, error, sse

from orchestrator import (
    AssistantMessage,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.messages import ReasoningBlock
from orchestrator.model import (
    ModelRequest,
    ReasoningDeltaEvent,
    ResponseCompletedEvent,
    TextDeltaEvent,
    ToolCallStreamEvent,
    Usage,
)
from orchestrator.providers import (
    AuthenticationError,
    MalformedStreamError,
    OpenAIResponsesModel,
    RateLimitError,
    ServerError,
)

FIXTURES = Path(__file__).parent / "fixtures" / "providers"
TEXT_STREAM = (FIXTURES / "openai_responses_text.sse").read_text()
TOOLS_STREAM = (FIXTURES / "openai_responses_tools.sse").read_text()
ENCRYPTED = "gAAAAABowfCkQ2h5c3RlbS1lbmNyeXB0ZWQtcmVhc29uaW5nLXBheWxvYWQtZm9yLXRlc3Rz"


def event(kind: str, **fields: Any) -> str:
    """One event as the API frames it: ``event:`` and ``data:`` with the same type."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields}, separators=(',', ':'))}\n\n"


def response(status: str = "completed", output: list[Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": output or [], **fields}


def message_item(index: int, text: str) -> str:
    item = {"id": f"msg_{index}", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    body = event("response.output_item.added", output_index=index, item=item)
    body += event("response.output_text.delta", item_id=f"msg_{index}", output_index=index, content_index=0, delta=text)
    done = {**item, "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return body + event("response.output_item.done", output_index=index, item=done)


def call_item(index: int, call_id: str, name: str, fragments: list[str], done: bool = True) -> str:
    item = {"id": f"fc_{index}", "type": "function_call", "call_id": call_id, "name": name, "arguments": ""}
    body = event("response.output_item.added", output_index=index, item=item)
    for fragment in fragments:
        body += event(
            "response.function_call_arguments.delta", item_id=f"fc_{index}", output_index=index, delta=fragment
        )
    if done:
        final = {**item, "arguments": "".join(fragments), "status": "completed"}
        body += event("response.output_item.done", output_index=index, item=final)
    return body


def completed(status: str = "completed", **fields: Any) -> str:
    usage = {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5}
    kind = "response.incomplete" if status == "incomplete" else "response.completed"
    return event(kind, response=response(status, usage=usage, **fields))


def text_stream(text: str) -> str:
    return event("response.created", response=response("in_progress")) + message_item(0, text) + completed()


def model(server: Server, sleeps: Sleeps | None = None, **options: Any) -> OpenAIResponsesModel:
    options.setdefault("api_key", "sk-test")
    return OpenAIResponsesModel("gpt-5-mini", client=server.client(), sleep=sleeps, **options)


HELLO = ModelRequest([SystemMessage("Be brief."), UserMessage("Say hello")])


@tool
def get_weather(city: str) -> str:
    """Current weather of a city.

    Args:
        city: the city name
    """
    return f"sunny in {city}, 22C"


@tool
def get_time(city: str) -> str:
    """Local time in a city.

    Args:
        city: the city name
    """
    return f"12:00 in {city}"


async def test_text_streams_as_deltas_and_completes_with_cached_usage() -> None:
    server = Server(sse(TEXT_STREAM))
    events = await collect(model(server), HELLO)
    *deltas, last = events
    assert [d.text for d in deltas if isinstance(d, TextDeltaEvent)] == [
        "Hello", "!", " How", " can", " I", " help", " you", " today", "?",
    ]  # fmt: skip
    assert last == ResponseCompletedEvent(
        AssistantMessage("Hello! How can I help you today?"),
        Usage(1284, 9, cache_read_tokens=1152),
        stop_reason="end_turn",
        raw_stop_reason="completed",
    )
    [request] = server.requests
    assert str(request.url) == "https://api.openai.com/v1/responses"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert server.bodies()[0] == {
        "model": "gpt-5-mini",
        "input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}],
        "stream": True,
    }


async def test_reasoning_summaries_text_and_function_calls_stream_in_order() -> None:
    server = Server(sse(TOOLS_STREAM))
    chosen = model(server, reasoning_effort="low", extra_body={"include": ["reasoning.encrypted_content"]})
    events = await collect(chosen, ModelRequest([UserMessage("weather and time in Paris?")], [get_weather, get_time]))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDeltaEvent))
    assert reasoning == (
        "**Planning the lookups**\n\nThe user asks for weather and time in Paris."
        "\n\n**Calling both tools**\n\nI will call get_weather and get_time together."
    )
    assert [e.text for e in events if isinstance(e, TextDeltaEvent)] == ["Checking ", "both ", "\U0001f600."]
    announced = [e for e in events if isinstance(e, ToolCallStreamEvent)]
    assert announced == [
        ToolCallStreamEvent("call_Q1xAw9", "get_weather"),
        ToolCallStreamEvent("call_R2yBx0", "get_time"),
    ]
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    assert last.message.content == "Checking both \U0001f600."
    assert last.message.tool_calls == (
        ToolCall("call_Q1xAw9", "get_weather", {"city": "Paris"}),
        ToolCall("call_R2yBx0", "get_time", {"city": "Paris"}),
    )
    assert last.message.reasoning == (
        ReasoningBlock(reasoning, data=ENCRYPTED, id="rs_68c1f0a4e5d6c7b8a9f0e1d2c3b4a5f6"),
    )
    assert (last.stop_reason, last.raw_stop_reason) == ("tool_use", "completed")
    assert last.usage == Usage(2310, 212, cache_read_tokens=2048)
    body = server.bodies()[0]
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["tools"][0] == {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city name"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": False,
    }


async def test_a_tool_round_trip_sends_reasoning_calls_and_outputs_back_in_order() -> None:
    server = Server(sse(TOOLS_STREAM), sse(text_stream("Sunny, and it is noon.")))
    agent = await create_agent(model(server), tools=[get_weather, get_time], system_prompt="You report weather.")
    answer = await agent.run("Weather and time in Paris?")
    assert answer.content == "Sunny, and it is noon."
    second = server.bodies()[1]["input"]
    assert second[:2] == [
        {"role": "system", "content": "You report weather."},
        {"role": "user", "content": "Weather and time in Paris?"},
    ]
    reasoning_item = second[2]
    assert reasoning_item["type"] == "reasoning" and reasoning_item["id"] == "rs_68c1f0a4e5d6c7b8a9f0e1d2c3b4a5f6"
    assert reasoning_item["encrypted_content"] == ENCRYPTED
    assert reasoning_item["summary"][0]["type"] == "summary_text"
    assert second[3:6] == [
        {"role": "assistant", "content": "Checking both \U0001f600."},
        {"type": "function_call", "call_id": "call_Q1xAw9", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_R2yBx0", "name": "get_time", "arguments": '{"city": "Paris"}'},
    ]
    outputs = sorted(second[6:], key=lambda item: str(item["call_id"]))  # results come in the order they finish
    assert outputs == [
        {"type": "function_call_output", "call_id": "call_Q1xAw9", "output": "sunny in Paris, 22C"},
        {"type": "function_call_output", "call_id": "call_R2yBx0", "output": "12:00 in Paris"},
    ]


async def test_images_and_history_encode_as_input_items() -> None:
    server = Server(sse(text_stream("ok")))
    history = ModelRequest(
        [
            UserMessage([TextPart("what is this?"), ImagePart(data=b"\x89PNG", media_type="image/png")]),
            UserMessage([ImagePart(url="https://example.com/cat.jpg")]),
            AssistantMessage(
                "",
                (ToolCall("c1", "lookup", {}, invalid_arguments='{"city": "Par'),),
                reasoning=(ReasoningBlock("thinking", signature="anthropic-sig"),),
            ),
            ToolMessage("c1", "lookup", "bad arguments", ToolStatus.FAILED),
        ]
    )
    await collect(model(server), history)
    assert server.bodies()[0]["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw==", "detail": "auto"},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"city": "Par'},
        {"type": "function_call_output", "call_id": "c1", "output": "bad arguments"},
    ]


@pytest.mark.parametrize(
    ("reason", "stop"), [("max_output_tokens", "max_tokens"), ("content_filter", "content_filter"), ("other", "other")]
)
async def test_an_incomplete_response_names_its_reason(reason: str, stop: str) -> None:
    body = message_item(0, "Partial") + call_item(1, "call_cut", "get_weather", ['{"ci'], done=False)
    body += completed("incomplete", incomplete_details={"reason": reason})
    events = await collect(model(Server(sse(body))), HELLO)
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    assert (last.stop_reason, last.raw_stop_reason) == (stop, reason)
    assert ToolCallStreamEvent("call_cut", "get_weather") in events
    [cut] = last.message.tool_calls
    assert cut.arguments == {} and cut.invalid_arguments == '{"ci'


async def test_a_refusal_streams_as_text_and_stops_as_refusal() -> None:
    item = {"id": "msg_0", "type": "message", "role": "assistant", "content": []}
    body = event("response.output_item.added", output_index=0, item=item)
    body += event("response.refusal.delta", item_id="msg_0", output_index=0, content_index=0, delta="I can't help.")
    events = await collect(model(Server(sse(body + completed()))), HELLO)
    assert TextDeltaEvent("I can't help.") in events
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent) and last.stop_reason == "refusal"


async def test_a_stream_of_only_the_terminal_event_is_read_from_its_output() -> None:
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Short plan."}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
        },
    ]
    events = await collect(model(Server(sse(completed(output=output)))), HELLO)
    assert events[:3] == [
        ReasoningDeltaEvent("Short plan."),
        TextDeltaEvent("Done."),
        ToolCallStreamEvent("call_1", "get_weather"),
    ]
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    assert last.message.tool_calls == (ToolCall("call_1", "get_weather", {"city": "Oslo"}),)
    assert last.message.reasoning == (ReasoningBlock("Short plan.", id="rs_1"),)


async def test_a_stream_cut_before_its_terminal_event_is_malformed_and_not_retried() -> None:
    server = Server(sse(message_item(0, "Hello")), sse(text_stream("never")))
    with pytest.raises(MalformedStreamError, match=r"response\.completed"):
        await collect(model(server), HELLO)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (event("response.output_text.delta", output_index=3, delta="x"), "unknown output item 3"),
        (message_item(0, "a") + event("response.output_text.delta", output_index=0, delta="x"), "already done"),
        (call_item(0, "c", "f", [], done=False) + event("response.output_text.delta", output_index=0, delta="x"),
         "for a function_call item"),
        (message_item(0, "a") + message_item(0, "b"), "added twice"),
        (call_item(0, "dup", "f", ["{}"]) + call_item(1, "dup", "f", ["{}"]), "two function calls"),
        (call_item(0, "", "f", ["{}"]), "has no call_id"),
        (event("response.output_item.added", output_index="0", item={"type": "message"}), "output_index"),
        (event("response.output_item.added", output_index=0, item={"type": "message"})
         + event("response.output_text.delta", output_index=0, delta=7), "delta should be a string"),
    ],
)  # fmt: skip
async def test_protocol_violations_are_malformed_stream_errors(body: str, message: str) -> None:
    with pytest.raises(MalformedStreamError, match=message):
        await collect(model(Server(sse(body + completed())), max_retries=0), HELLO)


async def test_a_failed_response_before_any_output_is_typed_and_retried() -> None:
    failed = event(
        "response.failed",
        response=response("failed", error={"code": "rate_limit_exceeded", "message": "slow down"}),
    )
    server = Server(sse(failed), sse(text_stream("Hello.")))
    sleeps = Sleeps()
    events = await collect(model(server, sleeps), HELLO)
    assert events[-1] == ResponseCompletedEvent(
        AssistantMessage("Hello."),
        Usage(50, 5, cache_read_tokens=0),
        stop_reason="end_turn",
        raw_stop_reason="completed",
    )
    assert len(sleeps.delays) == 1
    with pytest.raises(RateLimitError, match="slow down"):
        await collect(model(Server(sse(failed)), max_retries=0), HELLO)


async def test_an_error_event_after_output_is_typed_and_not_retried() -> None:
    body = message_item(0, "Hel") + event("error", code="server_error", message="The server had an error")
    server = Server(sse(body), sse(text_stream("never")))
    with pytest.raises(ServerError, match="server had an error"):
        await collect(model(server), HELLO)
    assert len(server.requests) == 1


async def test_http_errors_are_typed_and_a_missing_key_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(error(401, {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}))
    with pytest.raises(AuthenticationError, match="Incorrect API key"):
        await collect(model(server), HELLO)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(AuthenticationError, match="OPENAI_API_KEY"):
        await collect(OpenAIResponsesModel("gpt-5-mini"), HELLO)


async def test_unknown_event_types_are_skipped() -> None:
    body = event("response.created", response=response("in_progress"))
    body += event("response.web_search_call.searching", output_index=0, item_id="ws_1")
    body += event("keepalive") + text_stream("Hi")
    events = await collect(model(Server(sse(body))), HELLO)
    assert [e.text for e in events if isinstance(e, TextDeltaEvent)] == ["Hi"]


async def test_a_tool_result_with_images_sends_them_in_its_output() -> None:
    server = Server(sse(text_stream("A rising line.")))
    result = ToolMessage("c1", "chart", (TextPart("the chart:"), ImagePart(data=b"\x89PNG", media_type="image/png")))
    history = ModelRequest([AssistantMessage("", (ToolCall("c1", "chart", {}),)), result])
    await collect(model(server), history)
    assert server.bodies()[0]["input"][1] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_text", "text": "the chart:"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw==", "detail": "auto"},
        ],
    }


async def test_the_agent_streams_reasoning_and_reports_stop_reasons_and_usage() -> None:
    from orchestrator import events as ev

    cut = message_item(0, "Cut") + completed("incomplete", incomplete_details={"reason": "max_output_tokens"})
    server = Server(sse(TOOLS_STREAM), sse(cut))
    agent = await create_agent(model(server), tools=[get_weather, get_time])
    events = [event async for event in agent.stream("Weather and time in Paris?")]
    reasoning = "".join(e.text for e in events if isinstance(e, ev.ReasoningDeltaEvent))
    assert reasoning.startswith("**Planning the lookups**") and reasoning.endswith("get_time together.")
    first, second = [e for e in events if isinstance(e, ev.ModelCompletedEvent)]
    assert (first.stop_reason, first.raw_stop_reason) == ("tool_use", "completed")
    assert first.usage == Usage(2310, 212, cache_read_tokens=2048)
    assert first.message.reasoning[0].data == ENCRYPTED
    assert (second.stop_reason, second.raw_stop_reason) == ("max_tokens", "max_output_tokens")

"""AnthropicModel against recorded-style Messages streams on a mock transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from provider_mock import BrokenStream, Server, Sleeps, collect, error, sse

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
from orchestrator.model import ModelRequest, ResponseCompletedEvent, TextDeltaEvent, ToolCallStreamEvent, Usage
from orchestrator.providers import (
    AnthropicModel,
    AuthenticationError,
    BadRequestError,
    MalformedStreamError,
    ProviderConnectionError,
    RateLimitError,
    ServerError,
)
from orchestrator.tools import ServerToolDefinition

TEXT_STREAM = (Path(__file__).parent / "fixtures" / "providers" / "anthropic_text.sse").read_text()


def event(payload: dict[str, Any]) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


def start(input_tokens: int) -> str:
    message = {
        "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-20250514",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 2},
    }
    return event({"type": "message_start", "message": message})


def finish(reason: str, output_tokens: int) -> str:
    delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}}
    return event({**delta, "usage": {"output_tokens": output_tokens}}) + event({"type": "message_stop"})


def text_block(index: int, *pieces: str) -> str:
    body = event({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
    for piece in pieces:
        body += event({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})
    return body + event({"type": "content_block_stop", "index": index})


def tool_block(index: int, call_id: str, name: str, *fragments: str) -> str:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    body = event({"type": "content_block_start", "index": index, "content_block": block})
    for fragment in fragments:
        delta = {"type": "input_json_delta", "partial_json": fragment}
        body += event({"type": "content_block_delta", "index": index, "delta": delta})
    return body + event({"type": "content_block_stop", "index": index})


def text_stream(text: str) -> str:
    return start(300) + text_block(0, text) + finish("end_turn", 12)


def model(server: Server, sleeps: Sleeps | None = None, **options: Any) -> AnthropicModel:
    """The model under test; these tests pin the plain encoding, so prompt caching is off
    (tests/test_providers_anthropic_features.py covers it, on by default)."""
    options.setdefault("api_key", "sk-ant-test")
    options.setdefault("prompt_caching", False)
    return AnthropicModel("claude-sonnet-4-20250514", client=server.client(), sleep=sleeps, **options)


HELLO = ModelRequest([SystemMessage("Be brief."), UserMessage("Say hello")])


@tool
def get_weather(city: str) -> str:
    """Current weather of a city.

    Args:
        city: the city name
    """
    return f"sunny in {city}, 22C"


async def test_text_streams_as_deltas_then_completes_with_usage() -> None:
    server = Server(sse(TEXT_STREAM))
    events = await collect(model(server), HELLO)
    assert events == [
        TextDeltaEvent("Hello"),
        TextDeltaEvent("!"),
        ResponseCompletedEvent(AssistantMessage("Hello!"), Usage(25, 15, 0, 0), "end_turn", "end_turn"),
    ]
    [request] = server.requests
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert server.bodies()[0] == {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 4096,
        "stream": True,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}],
    }


async def test_tool_use_blocks_are_assembled_and_announced_at_block_stop() -> None:
    stream = (
        start(410)
        + text_block(0, "Let me check.")
        + tool_block(1, "toolu_01A", "get_weather", '{"city', '": "Par', 'is"}')
        + tool_block(2, "toolu_01B", "get_weather", "", '{"city": "Oslo"}')
        + finish("tool_use", 92)
    )
    events = await collect(model(Server(sse(stream))), ModelRequest([UserMessage("weather?")], [get_weather]))
    assert events == [
        TextDeltaEvent("Let me check."),
        ToolCallStreamEvent("toolu_01A", "get_weather"),
        ToolCallStreamEvent("toolu_01B", "get_weather"),
        ResponseCompletedEvent(
            AssistantMessage(
                "Let me check.",
                (
                    ToolCall("toolu_01A", "get_weather", {"city": "Paris"}),
                    ToolCall("toolu_01B", "get_weather", {"city": "Oslo"}),
                ),
            ),
            Usage(410, 92),
            "tool_use",
            "tool_use",
        ),
    ]


async def test_tool_call_round_trip_through_the_agent() -> None:
    server = Server(
        sse(start(400) + tool_block(0, "toolu_01Vx", "get_weather", '{"ci', 'ty": "Paris"}') + finish("tool_use", 40)),
        sse(text_stream("It is sunny in Paris.")),
    )
    agent = await create_agent(model(server), tools=[get_weather], system_prompt="You report weather.")
    answer = await agent.run("Weather in Paris?")
    assert answer == AssistantMessage("It is sunny in Paris.")
    first, second = server.bodies()
    assert first["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather of a city.",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "the city name"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        }
    ]
    assert second["system"] == "You report weather."
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_01Vx", "name": "get_weather", "input": {"city": "Paris"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01Vx", "content": "sunny in Paris, 22C"}],
        },
    ]


async def test_tool_results_of_one_turn_form_one_user_message_with_is_error() -> None:
    server = Server(sse(text_stream("ok")))
    history = [
        SystemMessage("Rule one."),
        UserMessage("go"),
        AssistantMessage("", (ToolCall("t1", "a", {}), ToolCall("t2", "b", {"x": 1}))),
        ToolMessage("t1", "a", "done"),
        ToolMessage("t2", "b", "rejected: not allowed", ToolStatus.FAILED),
        UserMessage("also this"),
        SystemMessage("Rule two."),
    ]
    await collect(model(server), ModelRequest(history))
    body = server.bodies()[0]
    assert body["system"] == "Rule one.\n\nRule two."
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "a", "input": {}},
                {"type": "tool_use", "id": "t2", "name": "b", "input": {"x": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "done"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "rejected: not allowed", "is_error": True},
                {"type": "text", "text": "also this"},
            ],
        },
    ]


async def test_malformed_tool_input_becomes_a_failed_result_the_model_corrects() -> None:
    ran: list[str] = []

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        ran.append(city)
        return f"found {city}"

    server = Server(
        sse(start(100) + tool_block(0, "toolu_bad", "lookup", '{"city": "Par') + finish("tool_use", 10)),
        sse(start(150) + tool_block(0, "toolu_good", "lookup", '{"city": "Paris"}') + finish("tool_use", 10)),
        sse(text_stream("Found it.")),
    )
    agent = await create_agent(model(server), tools=[lookup])
    answer = await agent.run("find Paris")
    assert answer.content == "Found it."
    assert ran == ["Paris"]
    [result] = server.bodies()[1]["messages"][2]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_bad"
    assert result["is_error"] is True
    assert "not a valid JSON object" in result["content"] and '{"city": "Par' in result["content"]


async def test_images_become_base64_and_url_source_blocks() -> None:
    server = Server(sse(text_stream("A red dot.")))
    message = UserMessage(
        (
            TextPart("What is this?"),
            ImagePart(data=b"\xff\xd8\xff", media_type="image/jpeg"),
            ImagePart(url="https://x/y.png"),
        )
    )
    await collect(model(server), ModelRequest([message]))
    assert server.bodies()[0]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            ],
        }
    ]


async def test_server_tools_are_sent_beside_local_tools() -> None:
    server = Server(sse(text_stream("ok")))
    search = ServerToolDefinition("web_search_20250305", {"name": "web_search", "max_uses": 3})
    await collect(model(server), ModelRequest([UserMessage("news?")], [get_weather], [search]))
    tools = server.bodies()[0]["tools"]
    assert [t.get("name") for t in tools] == ["get_weather", "web_search"]
    assert tools[1] == {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


async def test_an_unversioned_server_tool_is_sent_with_its_version_and_name() -> None:
    server = Server(sse(text_stream("ok")))
    hosted = (ServerToolDefinition(type="web_search"), ServerToolDefinition("code_execution_20250522"))
    await collect(model(server), ModelRequest([UserMessage("news?")], (), hosted))
    assert server.bodies()[0]["tools"] == [
        {"type": "web_search_20250305", "name": "web_search"},
        {"type": "code_execution_20250522", "name": "code_execution"},
    ]


async def test_body_ending_without_message_stop_is_malformed_and_not_retried() -> None:
    truncated = start(10) + text_block(0, "Hel")[:-2]
    server = Server(sse(truncated), sse(text_stream("never")))
    sleeps = Sleeps()
    seen: list[object] = []
    with pytest.raises(MalformedStreamError, match="message_stop"):
        async for item in model(server, sleeps).stream(HELLO):
            seen.append(item)
    assert seen == [TextDeltaEvent("Hel")]
    assert len(server.requests) == 1 and sleeps.delays == []


async def test_connection_lost_mid_stream_is_not_retried() -> None:
    head = (start(10) + text_block(0, "Hi")).encode()
    server = Server(httpx.Response(200, stream=BrokenStream(head)), sse(text_stream("never")))
    with pytest.raises(ProviderConnectionError):
        await collect(model(server, Sleeps()), HELLO)
    assert len(server.requests) == 1


async def test_overloaded_error_event_before_any_output_is_retried() -> None:
    overloaded = event({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server = Server(sse(overloaded), sse(TEXT_STREAM))
    sleeps = Sleeps()
    events = await collect(model(server, sleeps), HELLO)
    assert events[-1] == ResponseCompletedEvent(AssistantMessage("Hello!"), Usage(25, 15, 0, 0), "end_turn", "end_turn")
    assert len(server.requests) == 2 and len(sleeps.delays) == 1


async def test_error_event_after_output_raises_typed_error() -> None:
    stream = (
        start(10)
        + text_block(0, "Hi")
        + event({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    server = Server(sse(stream))
    with pytest.raises(ServerError, match="Overloaded"):
        await collect(model(server, Sleeps()), HELLO)
    assert len(server.requests) == 1


async def test_rate_limit_waits_retry_after_then_succeeds() -> None:
    limited = error(
        429,
        {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your rate limit"},
        },
        {"retry-after": "7"},
    )
    server = Server(limited, sse(TEXT_STREAM))
    sleeps = Sleeps()
    events = await collect(model(server, sleeps), HELLO)
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert sleeps.delays == [7.0]


async def test_rate_limit_retry_after_beyond_total_timeout_is_raised_at_once() -> None:
    from orchestrator.providers import RetryPolicy

    limited = error(
        429, {"type": "error", "error": {"type": "rate_limit_error", "message": "later"}}, {"retry-after": "600"}
    )
    server = Server(limited)
    sleeps = Sleeps()
    with pytest.raises(RateLimitError) as raised:
        await collect(model(server, sleeps, retry=RetryPolicy(total_timeout=30.0)), HELLO)
    assert raised.value.retry_after == 600.0
    assert sleeps.delays == []


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (401, "authentication_error", AuthenticationError),
        (403, "permission_error", AuthenticationError),
        (400, "invalid_request_error", BadRequestError),
        (404, "not_found_error", BadRequestError),
    ],
)
async def test_client_errors_are_typed_and_not_retried(status: int, kind: str, expected: type[Exception]) -> None:
    server = Server(error(status, {"type": "error", "error": {"type": kind, "message": "nope"}}))
    sleeps = Sleeps()
    with pytest.raises(expected, match=f"HTTP {status} {kind}: nope"):
        await collect(model(server, sleeps), HELLO)
    assert len(server.requests) == 1 and sleeps.delays == []


async def test_overloaded_529_is_retried_then_raised() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server = Server(*[error(529, body) for _ in range(2)])
    sleeps = Sleeps()
    with pytest.raises(ServerError, match="Overloaded"):
        await collect(model(server, sleeps, max_retries=1), HELLO)
    assert len(server.requests) == 2 and len(sleeps.delays) == 1


async def test_missing_key_fails_at_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    server = Server()
    with pytest.raises(AuthenticationError, match="ANTHROPIC_API_KEY"):
        await collect(AnthropicModel("claude-sonnet-4-20250514", client=server.client()), HELLO)
    assert server.requests == []


async def test_key_and_base_url_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://proxy.internal:9000")
    server = Server(sse(TEXT_STREAM))
    await collect(AnthropicModel("claude-sonnet-4-20250514", client=server.client()), HELLO)
    assert str(server.requests[0].url) == "http://proxy.internal:9000/v1/messages"
    assert server.requests[0].headers["x-api-key"] == "sk-ant-env"

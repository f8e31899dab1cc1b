"""GeminiModel against recorded-style streamGenerateContent (alt=sse) streams on a mock transport."""

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
    BadRequestError,
    GeminiModel,
    MalformedStreamError,
    RateLimitError,
)
from orchestrator.providers.gemini import gemini_contents
from orchestrator.providers.gemini_stream import GENERATED_CALL_ID

FIXTURES = Path(__file__).parent / "fixtures" / "providers"
TEXT_STREAM = (FIXTURES / "gemini_text.sse").read_text()
TOOLS_STREAM = (FIXTURES / "gemini_tools.sse").read_text()
SIGNATURE = "CiQB0e2Kb3Jk8bqN7aTc0ZxhR1Ev5cW2cHhZt1dnQm5aQmcKZgHR7Ypl"
THOUGHTS = "**Planning the lookups**\n\nThe user asks for weather and time in Paris, so I call both tools."
URL = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def chunk(parts: list[dict[str, Any]], finish: str | None = None, **fields: Any) -> str:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return f"data: {json.dumps({'candidates': [candidate], **fields}, separators=(',', ':'))}\n\n"


def text_stream(text: str) -> str:
    return chunk([{"text": text}], "STOP", usageMetadata={"promptTokenCount": 40, "candidatesTokenCount": 4})


def model(server: Server, sleeps: Sleeps | None = None, **options: Any) -> GeminiModel:
    options.setdefault("api_key", "gm-test")
    return GeminiModel("gemini-2.5-flash", client=server.client(), sleep=sleeps, **options)


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
    assert events == [
        TextDeltaEvent("Hello! How"),
        TextDeltaEvent(" can I help you"),
        TextDeltaEvent(" today?"),
        ResponseCompletedEvent(
            AssistantMessage("Hello! How can I help you today?"),
            Usage(1290, 12, cache_read_tokens=1024),
            stop_reason="end_turn",
            raw_stop_reason="STOP",
        ),
    ]
    [request] = server.requests
    assert str(request.url) == URL
    assert request.headers["x-goog-api-key"] == "gm-test"
    assert "authorization" not in request.headers
    assert server.bodies()[0] == {
        "contents": [{"role": "user", "parts": [{"text": "Say hello"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
    }


async def test_thoughts_text_and_calls_stream_with_generated_unique_ids_and_signatures() -> None:
    server = Server(sse(TOOLS_STREAM), sse(TOOLS_STREAM))
    chosen = model(server, thinking_budget=1024, max_output_tokens=2048)
    request = ModelRequest([UserMessage("weather and time in Paris?")], [get_weather, get_time])
    events = await collect(chosen, request)
    thoughts = "".join(e.text for e in events if isinstance(e, ReasoningDeltaEvent))
    assert thoughts == THOUGHTS
    assert [e.text for e in events if isinstance(e, TextDeltaEvent)] == ["Checking both ", "\U0001f600."]
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    first_id, second_id = (call.id for call in last.message.tool_calls)
    assert GENERATED_CALL_ID.fullmatch(first_id) and GENERATED_CALL_ID.fullmatch(second_id)
    assert first_id != second_id
    assert [e for e in events if isinstance(e, ToolCallStreamEvent)] == [
        ToolCallStreamEvent(first_id, "get_weather"),
        ToolCallStreamEvent(second_id, "get_time"),
    ]
    assert last.message.tool_calls == (
        ToolCall(first_id, "get_weather", {"city": "Paris"}),
        ToolCall(second_id, "get_time", {"city": "Paris"}),
    )
    assert last.message.reasoning == (ReasoningBlock(thoughts), ReasoningBlock(signature=SIGNATURE, id=first_id))
    assert (last.stop_reason, last.raw_stop_reason) == ("tool_use", "STOP")
    assert last.usage == Usage(2310, 41 + 138, cache_read_tokens=2048)
    body = server.bodies()[0]
    assert body["generationConfig"] == {
        "maxOutputTokens": 2048,
        "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
    }
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Current weather of a city.",
                    "parametersJsonSchema": {
                        "type": "object",
                        "properties": {"city": {"type": "string", "description": "the city name"}},
                        "required": ["city"],
                        "additionalProperties": False,
                    },
                },
                {
                    "name": "get_time",
                    "description": "Local time in a city.",
                    "parametersJsonSchema": get_time.parameters,
                },
            ]
        }
    ]
    again = await collect(chosen, request)
    later = again[-1]
    assert isinstance(later, ResponseCompletedEvent)
    assert not {call.id for call in later.message.tool_calls} & {first_id, second_id}


async def test_a_tool_round_trip_sends_signatures_back_and_results_as_one_turn() -> None:
    server = Server(sse(TOOLS_STREAM), sse(text_stream("Sunny, and it is noon.")))
    agent = await create_agent(model(server), tools=[get_weather, get_time], system_prompt="You report weather.")
    answer = await agent.run("Weather and time in Paris?")
    assert answer.content == "Sunny, and it is noon."
    second = server.bodies()[1]
    assert second["systemInstruction"] == {"parts": [{"text": "You report weather."}]}
    contents = second["contents"]
    assert contents[:2] == [
        {"role": "user", "parts": [{"text": "Weather and time in Paris?"}]},
        {
            "role": "model",
            "parts": [
                {"text": THOUGHTS, "thought": True},
                {"text": "Checking both \U0001f600."},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE},
                {"functionCall": {"name": "get_time", "args": {"city": "Paris"}}},
            ],
        },
    ]
    assert contents[2:] == [  # in the order of the calls, whichever finished first
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "sunny in Paris, 22C"}}},
                {"functionResponse": {"name": "get_time", "response": {"output": "12:00 in Paris"}}},
            ],
        }
    ]


def test_results_are_sent_in_the_order_of_their_calls() -> None:
    calls = (ToolCall("a", "first", {}), ToolCall("b", "second", {}))
    _, contents = gemini_contents(
        (
            AssistantMessage("", calls),
            ToolMessage("b", "second", "2"),
            ToolMessage("a", "first", "1"),
            UserMessage("and now?"),
        )
    )
    assert [part["functionResponse"]["name"] for part in contents[1]["parts"][:2]] == ["first", "second"]
    assert contents[1]["parts"][2] == {"text": "and now?"}


async def test_ids_gemini_gives_are_kept_and_sent_back() -> None:
    body = chunk([{"functionCall": {"id": "fc-7", "name": "get_weather", "args": {"city": "Oslo"}}}], "STOP")
    server = Server(sse(body), sse(text_stream("Cold.")))
    agent = await create_agent(model(server), tools=[get_weather])
    await agent.run("Oslo?")
    contents = server.bodies()[1]["contents"]
    assert contents[1]["parts"] == [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}, "id": "fc-7"}}]
    response = {"name": "get_weather", "response": {"output": "sunny in Oslo, 22C"}, "id": "fc-7"}
    assert contents[2]["parts"] == [{"functionResponse": response}]


async def test_images_failed_results_and_text_signatures_encode_as_parts() -> None:
    server = Server(sse(text_stream("ok")))
    history = ModelRequest(
        [
            UserMessage([TextPart("what is this?"), ImagePart(data=b"\x89PNG", media_type="image/png")]),
            UserMessage([ImagePart(url="https://example.com/cat.jpg", media_type="image/jpeg")]),
            AssistantMessage("It is a cat.", reasoning=(ReasoningBlock(signature="sig-text"),)),
            AssistantMessage("", (ToolCall("gcall_0123456789ab_0", "lookup", {"q": 1}),)),
            ToolMessage("gcall_0123456789ab_0", "lookup", "no such thing", ToolStatus.FAILED),
        ]
    )
    await collect(model(server), history)
    assert server.bodies()[0]["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "what is this?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}},
                {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
            ],
        },
        {
            "role": "model",
            "parts": [
                {"text": "It is a cat.", "thoughtSignature": "sig-text"},
                {"functionCall": {"name": "lookup", "args": {"q": 1}}},
            ],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "lookup", "response": {"error": "no such thing"}}}]},
    ]


@pytest.mark.parametrize(
    ("finish", "stop"),
    [("MAX_TOKENS", "max_tokens"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
     ("MALFORMED_FUNCTION_CALL", "other")],
)  # fmt: skip
async def test_finish_reasons_map_to_stop_reasons(finish: str, stop: str) -> None:
    events = await collect(model(Server(sse(chunk([{"text": "Partial"}], finish)))), HELLO)
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    assert (last.stop_reason, last.raw_stop_reason) == (stop, finish)


async def test_a_blocked_prompt_completes_empty_with_a_content_filter_stop() -> None:
    body = 'data: {"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":7}}\n\n'
    events = await collect(model(Server(sse(body))), HELLO)
    assert events == [
        ResponseCompletedEvent(
            AssistantMessage(""), Usage(7, 0), stop_reason="content_filter", raw_stop_reason="PROHIBITED_CONTENT"
        )
    ]


async def test_a_stream_cut_before_its_finish_reason_is_malformed_and_not_retried() -> None:
    server = Server(sse(chunk([{"text": "Hello"}])), sse(text_stream("never")))
    with pytest.raises(MalformedStreamError, match="finishReason"):
        await collect(model(server), HELLO)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (chunk([{"functionCall": {"name": "f", "args": [1]}}], "STOP"), "args should be an object"),
        (chunk([{"functionCall": {"args": {}}}], "STOP"), "name should be a string"),
        (chunk([{"functionCall": {"id": "x", "name": "f"}}, {"functionCall": {"id": "x", "name": "f"}}], "STOP"),
         "two function calls"),
        (chunk([{"text": 5}], "STOP"), "text should be a string"),
        ('data: {"candidates":{"content":{}}}\n\n', "candidates should be an array"),
        ("data: [1, 2]\n\n", "not a JSON object"),
    ],
)  # fmt: skip
async def test_protocol_violations_are_malformed_stream_errors(body: str, message: str) -> None:
    with pytest.raises(MalformedStreamError, match=message):
        await collect(model(Server(sse(body)), max_retries=0), HELLO)


async def test_an_error_object_in_the_stream_is_typed_by_its_status() -> None:
    body = 'data: {"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED"}}\n\n'
    server = Server(sse(body), sse(text_stream("Hello.")))
    sleeps = Sleeps()
    events = await collect(model(server, sleeps), HELLO)
    assert isinstance(events[-1], ResponseCompletedEvent) and len(sleeps.delays) == 1
    with pytest.raises(RateLimitError, match="RESOURCE_EXHAUSTED: Quota exceeded"):
        await collect(model(Server(sse(body)), max_retries=0), HELLO)


async def test_http_errors_in_gemini_form_are_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}}
    with pytest.raises(BadRequestError, match="INVALID_ARGUMENT: API key not valid"):
        await collect(model(Server(error(400, payload))), HELLO)
    limited = {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}
    server = Server(error(429, limited, {"retry-after": "3"}), sse(text_stream("ok")))
    sleeps = Sleeps()
    await collect(model(server, sleeps), HELLO)
    assert sleeps.delays == [3.0]
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(AuthenticationError, match="GEMINI_API_KEY"):
        await collect(GeminiModel("gemini-2.5-flash"), HELLO)


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_BASE_URL", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9/gemini/")
    monkeypatch.setenv("GEMINI_MODEL", "models/gemini-2.5-pro")
    chosen = GeminiModel()
    assert chosen.api_key == "from-google"
    assert chosen.url == "http://127.0.0.1:9/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"


async def test_empty_chunks_are_keepalives_and_extra_candidates_are_ignored() -> None:
    other = {"content": {"parts": [{"text": "alternative"}], "role": "model"}, "index": 1}
    body = "data: {}\n\n" + f"data: {json.dumps({'candidates': [other]})}\n\n" + text_stream("Only this.")
    events = await collect(model(Server(sse(body))), HELLO)
    assert [e.text for e in events if isinstance(e, TextDeltaEvent)] == ["Only this."]


def test_tool_results_with_images_describe_them_and_show_them_after_the_results() -> None:
    calls = (ToolCall("a", "chart", {}), ToolCall("b", "photo", {}))
    chart = ToolMessage("a", "chart", (TextPart("chart: "), ImagePart(data=b"\x89PNG", media_type="image/png")))
    photo = ToolMessage("b", "photo", (ImagePart(url="https://example.com/p.jpg", media_type="image/jpeg"),))
    _, contents = gemini_contents((AssistantMessage("", calls), photo, chart, UserMessage("compare them")))
    assert contents[1] == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "chart",
                    "response": {"output": "chart: [image: image/png, 4 bytes]"},
                    "id": "a",
                }
            },
            {
                "functionResponse": {
                    "name": "photo",
                    "response": {"output": "[image: image/jpeg, https://example.com/p.jpg]"},
                    "id": "b",
                }
            },
            {"text": "Images returned by tool call a (chart):"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}},
            {"text": "Images returned by tool call b (photo):"},
            {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/p.jpg"}},
            {"text": "compare them"},
        ],
    }


async def test_the_agent_streams_thoughts_and_reports_stop_reasons_and_usage() -> None:
    from orchestrator import events as ev

    server = Server(sse(TOOLS_STREAM), sse(chunk([{"text": "Cut"}], "MAX_TOKENS")))
    agent = await create_agent(model(server), tools=[get_weather, get_time])
    events = [event async for event in agent.stream("Weather and time in Paris?")]
    assert "".join(e.text for e in events if isinstance(e, ev.ReasoningDeltaEvent)) == THOUGHTS
    first, second = [e for e in events if isinstance(e, ev.ModelCompletedEvent)]
    assert (first.stop_reason, first.raw_stop_reason) == ("tool_use", "STOP")
    assert first.usage == Usage(2310, 179, cache_read_tokens=2048)
    assert first.message.reasoning[0] == ReasoningBlock(THOUGHTS)
    assert (second.stop_reason, second.raw_stop_reason) == ("max_tokens", "MAX_TOKENS")

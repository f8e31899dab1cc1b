"""OpenAIChatModel against recorded-style Chat Completions streams on a mock transport."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
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
    AuthenticationError,
    BadRequestError,
    MalformedStreamError,
    OpenAIChatModel,
    ProviderConnectionError,
    RateLimitError,
    ServerError,
)

TEXT_STREAM = (Path(__file__).parent / "fixtures" / "providers" / "openai_text.sse").read_text()


def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> str:
    """One ``data:`` line in the exact envelope the API sends."""
    payload = {
        "id": "chatcmpl-C3d4",
        "object": "chat.completion.chunk",
        "created": 1718000100,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_0ba0d124f1",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def usage_chunk(prompt: int, completion: int) -> str:
    payload = {
        "id": "chatcmpl-C3d4",
        "object": "chat.completion.chunk",
        "created": 1718000100,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def tool_call_stream(*calls: tuple[str, str, list[str]]) -> str:
    """A response that streams each (id, name, argument fragments) call, as the API does."""
    body = chunk({"role": "assistant", "content": None})
    for index, (call_id, name, fragments) in enumerate(calls):
        start = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        body += chunk({"tool_calls": [start]})
        for fragment in fragments:
            body += chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    body += chunk({}, finish="tool_calls")
    return body + usage_chunk(81, 17) + "data: [DONE]\n\n"


def text_stream(text: str) -> str:
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": text}) + chunk({}, finish="stop")
    return body + usage_chunk(120, 9) + "data: [DONE]\n\n"


def model(server: Server, sleeps: Sleeps | None = None, **options: Any) -> OpenAIChatModel:
    options.setdefault("api_key", "sk-test")
    return OpenAIChatModel("gpt-4o-mini", client=server.client(), sleep=sleeps, **options)


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
        TextDeltaEvent(", world"),
        TextDeltaEvent("!"),
        ResponseCompletedEvent(AssistantMessage("Hello, world!"), Usage(19, 4, 0), "end_turn", "stop"),
    ]
    [request] = server.requests
    assert request.method == "POST"
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert server.bodies()[0] == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_tool_calls_are_assembled_by_index_and_announced_when_complete() -> None:
    stream = tool_call_stream(
        ("call_A", "get_weather", ['{"ci', 'ty": "Par', 'is"}']),
        ("call_B", "get_weather", ['{"city":', ' "Oslo"}']),
    )
    events = await collect(model(Server(sse(stream))), ModelRequest([UserMessage("weather?")], [get_weather]))
    assert events == [
        ToolCallStreamEvent("call_A", "get_weather"),
        ToolCallStreamEvent("call_B", "get_weather"),
        ResponseCompletedEvent(
            AssistantMessage(
                "",
                (
                    ToolCall("call_A", "get_weather", {"city": "Paris"}),
                    ToolCall("call_B", "get_weather", {"city": "Oslo"}),
                ),
            ),
            Usage(81, 17),
            "tool_use",
            "tool_calls",
        ),
    ]


async def test_tool_call_round_trip_through_the_agent() -> None:
    server = Server(
        sse(tool_call_stream(("call_Vx1", "get_weather", ['{"city"', ': "Pa', 'ris"}']))),
        sse(text_stream("It is sunny in Paris.")),
    )
    agent = await create_agent(model(server), tools=[get_weather], system_prompt="You report weather.")
    answer = await agent.run("Weather in Paris?")
    assert answer == AssistantMessage("It is sunny in Paris.")
    first, second = server.bodies()
    assert first["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather of a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "the city name"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    assert second["messages"] == [
        {"role": "system", "content": "You report weather."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_Vx1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_Vx1", "content": "sunny in Paris, 22C"},
    ]


async def test_malformed_tool_arguments_become_a_failed_result_the_model_corrects() -> None:
    ran: list[str] = []

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        ran.append(city)
        return f"found {city}"

    server = Server(
        sse(tool_call_stream(("call_bad", "lookup", ['{"city": "Par']))),
        sse(tool_call_stream(("call_good", "lookup", ['{"city": "Paris"}']))),
        sse(text_stream("Found it.")),
    )
    agent = await create_agent(model(server), tools=[lookup])
    answer = await agent.run("find Paris")
    assert answer.content == "Found it."
    assert ran == ["Paris"]
    second = server.bodies()[1]["messages"]
    assert second[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Par'
    failed = second[2]
    assert failed["role"] == "tool" and failed["tool_call_id"] == "call_bad"
    assert "not a valid JSON object" in failed["content"]
    assert '{"city": "Par' in failed["content"]
    assert server.bodies()[2]["messages"][4] == {"role": "tool", "tool_call_id": "call_good", "content": "found Paris"}


async def test_the_model_completed_event_carries_the_reported_usage() -> None:
    server = Server(
        sse(tool_call_stream(("call_1", "get_weather", ['{"city": "Oslo"}']))),
        sse(text_stream("Sunny.")),
    )
    client = await create_agent(model(server), tools=[get_weather])
    usages = [event.payload["usage"] async for event in client.stream("Weather?") if event.name == "model_completed"]
    assert usages == [Usage(81, 17), Usage(120, 9)]


async def test_images_are_sent_as_data_urls_and_urls() -> None:
    server = Server(sse(text_stream("A red dot.")))
    message = UserMessage(
        (
            TextPart("What is this?"),
            ImagePart(data=b"\x89PNG\r\n", media_type="image/png"),
            ImagePart(url="https://x/y.jpg"),
        )
    )
    await collect(model(server), ModelRequest([message]))
    assert server.bodies()[0]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.jpg"}},
            ],
        }
    ]


async def test_failed_tool_results_and_history_encode_as_tool_messages() -> None:
    server = Server(sse(text_stream("ok")))
    history = [
        UserMessage("go"),
        AssistantMessage("Checking.", (ToolCall("c1", "get_weather", {"city": "Rome"}),)),
        ToolMessage("c1", "get_weather", "rejected: not allowed", ToolStatus.FAILED),
    ]
    await collect(model(server), ModelRequest(history, [get_weather]))
    messages = server.bodies()[0]["messages"]
    assert messages[1]["content"] == "Checking."
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "rejected: not allowed"}


async def test_body_ending_without_done_is_a_malformed_stream_and_not_retried() -> None:
    truncated = chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hel"}) + 'data: {"id":"chatcmpl-C3'
    server = Server(sse(truncated), sse(text_stream("never")))
    sleeps = Sleeps()
    seen: list[object] = []
    with pytest.raises(MalformedStreamError):
        async for event in model(server, sleeps).stream(HELLO):
            seen.append(event)
    assert seen == [TextDeltaEvent("Hel")]
    assert len(server.requests) == 1
    assert sleeps.delays == []


async def test_connection_lost_mid_stream_is_not_retried() -> None:
    head = (chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hi"})).encode()
    server = Server(httpx.Response(200, stream=BrokenStream(head)), sse(text_stream("never")))
    sleeps = Sleeps()
    seen: list[object] = []
    with pytest.raises(ProviderConnectionError):
        async for event in model(server, sleeps).stream(HELLO):
            seen.append(event)
    assert seen == [TextDeltaEvent("Hi")]
    assert len(server.requests) == 1


async def test_stream_without_done_through_the_agent_fails_the_request() -> None:
    server = Server(sse(chunk({"content": "partial"})))
    agent = await create_agent(model(server))
    with pytest.raises(MalformedStreamError):
        await agent.run("hi")


async def test_rate_limit_waits_retry_after_then_succeeds() -> None:
    limited = error(
        429,
        {"error": {"message": "Rate limit reached for gpt-4o-mini", "type": "requests", "code": "rate_limit_exceeded"}},
        {"retry-after": "1.5"},
    )
    server = Server(limited, sse(TEXT_STREAM))
    sleeps = Sleeps()
    events = await collect(model(server, sleeps), HELLO)
    assert events[-1] == ResponseCompletedEvent(AssistantMessage("Hello, world!"), Usage(19, 4, 0), "end_turn", "stop")
    assert sleeps.delays == [1.5]
    assert len(server.requests) == 2


async def test_rate_limit_gives_up_after_max_retries() -> None:
    limited = [
        error(429, {"error": {"message": "slow down", "type": "requests"}}, {"retry-after": "2"}) for _ in range(3)
    ]
    server = Server(*limited)
    sleeps = Sleeps()
    with pytest.raises(RateLimitError) as raised:
        await collect(model(server, sleeps, max_retries=2), HELLO)
    assert raised.value.retry_after == 2.0
    assert raised.value.status == 429
    assert sleeps.delays == [2.0, 2.0]


async def test_unauthorized_raises_authentication_error_without_retry() -> None:
    body = {
        "error": {
            "message": "Incorrect API key provided: sk-test.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    server = Server(error(401, body))
    sleeps = Sleeps()
    with pytest.raises(AuthenticationError, match="Incorrect API key"):
        await collect(model(server, sleeps), HELLO)
    assert len(server.requests) == 1 and sleeps.delays == []


async def test_bad_request_raises_without_retry() -> None:
    body = {"error": {"message": "Invalid 'messages[1].content'", "type": "invalid_request_error", "param": "messages"}}
    server = Server(error(400, body))
    with pytest.raises(BadRequestError, match="messages") as raised:
        await collect(model(server, Sleeps()), HELLO)
    assert raised.value.status == 400
    assert len(server.requests) == 1


async def test_server_error_is_retried_with_backoff_then_raised() -> None:
    server = Server(
        *[error(500, {"error": {"message": "The server had an error", "type": "server_error"}}) for _ in range(3)]
    )
    sleeps = Sleeps()
    with pytest.raises(ServerError, match="server had an error"):
        await collect(model(server, sleeps), HELLO)
    assert len(server.requests) == 3
    assert len(sleeps.delays) == 2
    assert 0.5 <= sleeps.delays[0] <= 0.625 and 1.0 <= sleeps.delays[1] <= 1.25


async def test_server_error_then_success() -> None:
    server = Server(error(503, {"error": {"message": "overloaded", "type": "server_error"}}), sse(TEXT_STREAM))
    sleeps = Sleeps()
    events = await collect(model(server, sleeps), HELLO)
    assert [e.text for e in events if isinstance(e, TextDeltaEvent)] == ["Hello", ", world", "!"]
    assert len(sleeps.delays) == 1


async def test_error_object_inside_the_stream_is_typed() -> None:
    body = 'data: {"error":{"message":"context length exceeded","type":"invalid_request_error"}}\n\n'
    with pytest.raises(BadRequestError, match="context length"):
        await collect(model(Server(sse(body)), Sleeps()), HELLO)


async def test_missing_key_fails_at_first_call_with_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    server = Server()
    missing = OpenAIChatModel("gpt-4o-mini", client=server.client())
    with pytest.raises(AuthenticationError, match="OPENAI_API_KEY"):
        await collect(missing, HELLO)
    assert server.requests == []


async def test_local_server_from_environment_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1/")
    server = Server(sse(TEXT_STREAM))
    local = OpenAIChatModel("llama-3.1-8b-instruct", client=server.client())
    events = await collect(local, HELLO)
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert str(server.requests[0].url) == "http://127.0.0.1:8080/v1/chat/completions"
    assert "authorization" not in server.requests[0].headers


def test_importing_the_library_does_not_import_httpx() -> None:
    import subprocess

    code = "import sys, orchestrator, orchestrator.providers; print('httpx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class HangingStream(httpx.AsyncByteStream):
    """A body that sends its head, then stalls until closed."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.head
        await trio.sleep_forever()

    async def aclose(self) -> None:
        self.closed = True


async def test_cancelling_the_consumer_closes_the_response() -> None:
    body = HangingStream((chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hi"})).encode())
    server = Server(httpx.Response(200, stream=body))
    seen: list[object] = []
    with trio.move_on_after(5) as scope:
        async for item in model(server).stream(HELLO):
            seen.append(item)
            scope.cancel()
    assert seen == [TextDeltaEvent("Hi")]
    assert body.closed


async def test_real_http_over_loopback_under_trio() -> None:
    """No mock: an owned httpx client talks to a trio TCP server on 127.0.0.1."""
    requests: list[bytes] = []

    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        while len(rest) < length:
            rest += await stream.receive_some(65536)
        requests.append(head + b"\r\n\r\n" + rest)
        payload = TEXT_STREAM.encode()
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
            + payload
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        local = OpenAIChatModel("local-model", api_key="", base_url=f"http://127.0.0.1:{port}/v1", timeout=5.0)
        with trio.fail_after(10):
            events = await collect(local, HELLO)
        nursery.cancel_scope.cancel()
    assert events[-1] == ResponseCompletedEvent(AssistantMessage("Hello, world!"), Usage(19, 4, 0), "end_turn", "stop")
    assert requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1")
    assert json.loads(requests[0].partition(b"\r\n\r\n")[2])["model"] == "local-model"


async def test_connection_failure_before_any_event_is_retried() -> None:
    server = Server(httpx.Response(200, stream=BrokenStream()), sse(TEXT_STREAM))
    sleeps = Sleeps()
    events = await collect(model(server, sleeps), HELLO)
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert len(server.requests) == 2 and len(sleeps.delays) == 1


async def test_total_timeout_bounds_the_wait_for_the_first_event(autojump_clock: trio.abc.Clock) -> None:
    from orchestrator.providers import ProviderTimeoutError, RetryPolicy

    body = HangingStream(chunk({"role": "assistant", "content": ""}).encode())
    server = Server(httpx.Response(200, stream=body))
    started = trio.current_time()
    with pytest.raises(ProviderTimeoutError, match=r"no response within 5\.0s"):
        await collect(model(server, retry=RetryPolicy(total_timeout=5.0)), HELLO)
    assert trio.current_time() - started == pytest.approx(5.0)
    assert body.closed


async def test_json_instead_of_an_event_stream_is_reported() -> None:
    server = Server(httpx.Response(200, json={"object": "chat.completion", "choices": []}))
    with pytest.raises(MalformedStreamError, match="expected an event stream"):
        await collect(model(server, Sleeps(), max_retries=0), HELLO)


async def test_a_stream_ending_after_its_finish_reason_without_done_completes() -> None:
    """Some compatible servers close the body after the last chunk; the response is whole."""
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hi"}) + chunk({}, finish="stop")
    tools = tool_call_stream(("c1", "get_weather", ['{"city":', '"Oslo"}'])).removesuffix("data: [DONE]\n\n")
    server = Server(sse(body + usage_chunk(5, 1)), sse(tools))
    events = await collect(model(server, Sleeps()), HELLO)
    assert events == [
        TextDeltaEvent("Hi"),
        ResponseCompletedEvent(AssistantMessage("Hi"), Usage(5, 1), "end_turn", "stop"),
    ]
    events = await collect(model(server, Sleeps()), HELLO)
    assert events[-1] == ResponseCompletedEvent(
        AssistantMessage("", [ToolCall("c1", "get_weather", {"city": "Oslo"})]), Usage(81, 17), "tool_use", "tool_calls"
    )
    assert len(server.requests) == 2


class TimingOut(httpx.AsyncByteStream):
    """A body that sends some bytes, then times out waiting for more."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.chunks:
            yield piece
        raise httpx.ReadTimeout("timed out")


async def test_timeouts_are_typed_and_retried_only_before_the_first_event() -> None:
    from orchestrator.providers import ProviderTimeoutError

    attempts: list[httpx.Request] = []
    answers = [
        httpx.ConnectTimeout("connect timed out"),
        httpx.Response(200, stream=TimingOut()),  # times out before any event: retried
        sse(TEXT_STREAM),
    ]

    def handle(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    sleeps = Sleeps()
    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    events = await collect(OpenAIChatModel("m", api_key="k", client=client, sleep=sleeps), HELLO)
    assert events[-1] == ResponseCompletedEvent(AssistantMessage("Hello, world!"), Usage(19, 4, 0), "end_turn", "stop")
    assert len(attempts) == 3 and len(sleeps.delays) == 2

    head = (chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hi"})).encode()
    server = Server(httpx.Response(200, stream=TimingOut(head)), sse(TEXT_STREAM))
    sleeps = Sleeps()
    seen: list[object] = []
    with pytest.raises(ProviderTimeoutError, match="ReadTimeout"):
        async for event in model(server, sleeps).stream(HELLO):
            seen.append(event)
    assert seen == [TextDeltaEvent("Hi")]
    assert len(server.requests) == 1 and sleeps.delays == []


async def test_retry_after_as_an_http_date_and_in_milliseconds_is_honoured() -> None:
    import email.utils
    import time

    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    body = {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}
    server = Server(
        error(429, body, {"retry-after": in_a_minute}),
        error(429, body, {"retry-after-ms": "250", "retry-after": "9"}),
        error(429, body, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}),  # in the past: no wait
        sse(TEXT_STREAM),
    )
    sleeps = Sleeps()
    events = await collect(model(server, sleeps, max_retries=3), HELLO)
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert 55 <= sleeps.delays[0] <= 60
    assert sleeps.delays[1:] == [0.25, 0.0]

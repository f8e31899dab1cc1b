"""Both adapters against hostile or broken streams: typed errors, clean text, bounded waits."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
from provider_mock import Server, Sleeps, collect, error, sse
from test_providers_anthropic import TEXT_STREAM as ANTHROPIC_TEXT
from test_providers_anthropic import event, finish, start, text_block, tool_block
from test_providers_anthropic import model as anthropic_model
from test_providers_openai import TEXT_STREAM as OPENAI_TEXT
from test_providers_openai import chunk, usage_chunk
from test_providers_openai import model as openai_model

from orchestrator import AssistantMessage, ToolCall, ToolMessage, UserMessage
from orchestrator.errors import ModelError
from orchestrator.model import ModelRequest, ResponseCompletedEvent, TextDeltaEvent, ToolCallStreamEvent, Usage
from orchestrator.providers import (
    MalformedStreamError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from orchestrator.providers.sse import MAX_SSE_LINE_BYTES

HELLO = ModelRequest([UserMessage("Say hello")])


def texts(events: list[Any]) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDeltaEvent)]


def completed(events: list[Any]) -> AssistantMessage:
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    return last.message


def raw_chunk(delta_json: str, finish: str | None = None) -> str:
    """A chunk whose delta is given as JSON text, so it can carry escapes like ``\\ud83d``."""
    reason = "null" if finish is None else json.dumps(finish)
    return f'data: {{"choices":[{{"index":0,"delta":{delta_json},"finish_reason":{reason}}}]}}\n\n'


def raw_event(kind: str, payload_json: str) -> str:
    return f"event: {kind}\ndata: {payload_json}\n\n"


def raw_block_start(content_json: str, index: str = "0") -> str:
    payload = f'{{"type":"content_block_start","index":{index},"content_block":{content_json}}}'
    return raw_event("content_block_start", payload)


def raw_text_delta(text_json: str) -> str:
    payload = f'{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{text_json}}}}}'
    return raw_event("content_block_delta", payload)


def open_block(block: str) -> str:
    """A block's events without its content_block_stop."""
    return block.removesuffix(event({"type": "content_block_stop", "index": 0}))


# -- text that cannot be encoded as UTF-8 ------------------------------------------------------


async def test_openai_surrogate_pair_split_between_chunks_is_joined() -> None:
    body = raw_chunk('{"content":"smile \\ud83d"}') + raw_chunk('{"content":"\\ude00 ok"}')
    body += raw_chunk("{}", finish="stop") + "data: [DONE]\n\n"
    events = await collect(openai_model(Server(sse(body))), HELLO)
    assert "".join(texts(events)) == "smile \U0001f600 ok"
    assert all(piece.encode("utf-8") for piece in texts(events))
    assert completed(events).content == "smile \U0001f600 ok"


async def test_openai_lone_surrogates_become_replacement_characters() -> None:
    body = raw_chunk('{"content":"a\\ud83d"}') + raw_chunk('{"content":"b\\udcff"}')
    body += raw_chunk("{}", finish="stop") + "data: [DONE]\n\n"
    events = await collect(openai_model(Server(sse(body))), HELLO)
    assert texts(events) == ["a", "\ufffdb\ufffd"]
    assert completed(events).content == "a\ufffdb\ufffd"


async def test_openai_tool_call_names_ids_and_arguments_are_cleaned() -> None:
    start_call = (
        '{"tool_calls":[{"index":0,"id":"c\\udc80","function":{"name":"f","arguments":"{\\"x\\": \\"\\ud83d"}}]}'
    )
    rest = '{"tool_calls":[{"index":0,"function":{"arguments":"\\ude00 \\\\ud83d\\"}"}}]}'
    body = raw_chunk(start_call) + raw_chunk(rest) + raw_chunk("{}", finish="tool_calls") + "data: [DONE]\n\n"
    events = await collect(openai_model(Server(sse(body))), HELLO)
    [call] = completed(events).tool_calls
    assert call == ToolCall("c\ufffd", "f", {"x": "\U0001f600 \ufffd"})
    json.dumps(call.arguments, ensure_ascii=False).encode("utf-8")


async def test_anthropic_surrogate_pair_split_between_deltas_is_joined() -> None:
    body = start(5)
    body += event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    body += raw_text_delta('"hi \\ud83d"') + raw_text_delta('"\\ude00"') + raw_text_delta('"\\ud83d"')
    body += event({"type": "content_block_stop", "index": 0}) + finish("end_turn", 3)
    events = await collect(anthropic_model(Server(sse(body))), HELLO)
    assert texts(events) == ["hi ", "\U0001f600", "\ufffd"]
    assert completed(events).content == "hi \U0001f600\ufffd"


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
async def test_history_with_lone_surrogates_still_builds_the_request(adapter: str) -> None:
    history = ModelRequest(
        [
            UserMessage("file \udcff name"),
            AssistantMessage("", (ToolCall("c1", "ls", {"path": "x\ud83d"}),)),
            ToolMessage("c1", "ls", "a\ud800b"),
        ]
    )
    server = Server(sse(OPENAI_TEXT if adapter == "openai" else ANTHROPIC_TEXT))
    chosen = openai_model(server) if adapter == "openai" else anthropic_model(server)
    events = await collect(chosen, history)
    assert isinstance(events[-1], ResponseCompletedEvent)
    sent = server.requests[0].content.decode("utf-8")
    assert "\\ud" not in sent and "\ufffd" in sent
    assert server.requests[0].headers["content-type"] == "application/json"


# -- idle timeout ------------------------------------------------------------------------------


class Trickle(httpx.AsyncByteStream):
    """Sends ``head``, then ``beat`` every ``every`` seconds, ``times`` times (forever when None), then ``tail``."""

    def __init__(self, head: bytes, beat: bytes, every: float, times: int | None = None, tail: bytes = b"") -> None:
        self.head, self.beat, self.every, self.times, self.tail = head, beat, every, times, tail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.head
        sent = 0
        while self.times is None or sent < self.times:
            await trio.sleep(self.every)
            yield self.beat
            sent += 1
        yield self.tail


async def test_openai_keepalive_comments_do_not_keep_a_started_stream_alive(autojump_clock: trio.abc.Clock) -> None:
    head = (chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hel"})).encode()
    server = Server(httpx.Response(200, stream=Trickle(head, b": keepalive\n\n", every=5)))
    seen: list[object] = []
    began = trio.current_time()
    with trio.fail_after(3600), pytest.raises(ProviderTimeoutError, match="idle_timeout"):
        async for item in openai_model(server, idle_timeout=30).stream(HELLO):
            seen.append(item)
    assert seen == [TextDeltaEvent("Hel")]
    assert trio.current_time() - began == pytest.approx(30)


async def test_openai_content_resets_the_idle_timeout(autojump_clock: trio.abc.Clock) -> None:
    head = chunk({"role": "assistant", "content": ""}).encode()
    tail = (chunk({}, finish="stop") + usage_chunk(1, 2) + "data: [DONE]\n\n").encode()
    stream = Trickle(head, chunk({"content": "."}).encode(), every=20, times=5, tail=tail)
    with trio.fail_after(3600):
        events = await collect(openai_model(Server(httpx.Response(200, stream=stream)), idle_timeout=30), HELLO)
    assert completed(events).content == "....."


async def test_anthropic_pings_do_not_keep_a_started_stream_alive(autojump_clock: trio.abc.Clock) -> None:
    head = (start(5) + open_block(text_block(0, "Hi"))).encode()
    ping = event({"type": "ping"}).encode()
    server = Server(httpx.Response(200, stream=Trickle(head, ping, every=5)))
    seen: list[object] = []
    began = trio.current_time()
    with trio.fail_after(3600), pytest.raises(ProviderTimeoutError, match="idle_timeout"):
        async for item in anthropic_model(server, idle_timeout=45).stream(HELLO):
            seen.append(item)
    assert seen == [TextDeltaEvent("Hi")]
    assert trio.current_time() - began == pytest.approx(45)


@pytest.mark.parametrize(
    "empty",
    [chunk({}), chunk({"content": ""}), 'data: {"choices":[]}\n\n', 'data: {"id":"x"}\n\n'],
    ids=["empty delta", "empty content", "no choices", "no fields"],
)
async def test_openai_chunks_that_carry_nothing_do_not_keep_a_started_stream_alive(
    autojump_clock: trio.abc.Clock, empty: str
) -> None:
    head = (chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hel"})).encode()
    server = Server(httpx.Response(200, stream=Trickle(head, empty.encode(), every=5)))
    began = trio.current_time()
    with trio.fail_after(3600), pytest.raises(ProviderTimeoutError, match="idle_timeout"):
        await collect(openai_model(server, idle_timeout=30), HELLO)
    assert trio.current_time() - began == pytest.approx(30)


async def test_openai_delta_fields_the_adapter_does_not_read_still_reset_the_idle_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    head = chunk({"role": "assistant", "content": ""}).encode()
    tail = (chunk({"content": "42"}) + chunk({}, finish="stop") + "data: [DONE]\n\n").encode()
    thinking = chunk({"reasoning_content": "hmm"}).encode()  # a reasoning model thinking for a long time
    stream = Trickle(head, thinking, every=20, times=10, tail=tail)
    with trio.fail_after(3600):
        events = await collect(openai_model(Server(httpx.Response(200, stream=stream)), idle_timeout=30), HELLO)
    assert completed(events).content == "42"


async def test_anthropic_event_types_it_ignores_do_not_keep_a_started_stream_alive(
    autojump_clock: trio.abc.Clock,
) -> None:
    head = (start(5) + open_block(text_block(0, "Hi"))).encode()
    unknown = event({"type": "keepalive_of_some_proxy"}).encode()
    server = Server(httpx.Response(200, stream=Trickle(head, unknown, every=5)))
    began = trio.current_time()
    with trio.fail_after(3600), pytest.raises(ProviderTimeoutError, match="idle_timeout"):
        await collect(anthropic_model(server, idle_timeout=45), HELLO)
    assert trio.current_time() - began == pytest.approx(45)


def test_idle_timeout_has_a_documented_default_and_must_be_positive() -> None:
    from orchestrator.providers import AnthropicModel, OpenAIChatModel
    from orchestrator.providers.base import DEFAULT_IDLE_TIMEOUT

    assert DEFAULT_IDLE_TIMEOUT == 300.0
    assert OpenAIChatModel("m", api_key="k").idle_timeout == DEFAULT_IDLE_TIMEOUT
    assert AnthropicModel("m", api_key="k", idle_timeout=None).idle_timeout is None
    with pytest.raises(ValueError, match="idle_timeout"):
        OpenAIChatModel("m", api_key="k", idle_timeout=0)


# -- malformed streams are typed ---------------------------------------------------------------

OPENAI_WRONG_TYPES = [
    '{"choices":"nope"}',
    '{"choices":[7]}',
    '{"choices":[{"index":"0","delta":{"content":"x"}}]}',
    '{"choices":[{"index":0,"delta":"text"}]}',
    '{"choices":[{"index":0,"delta":{"content":5}}]}',
    '{"choices":[{"index":0,"delta":{"tool_calls":{"index":0}}}]}',
    '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":"a"}]}}]}',
    '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":"f"}]}}]}',
    '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":["f"]}}]}}]}',
    '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":{"x":1}}]}}]}',
    '{"choices":[{"index":0,"delta":{},"finish_reason":1}]}',
    '{"choices":[],"usage":{"prompt_tokens":"many"}}',
    '{"choices":[],"usage":{"prompt_tokens":NaN}}',
    '{"choices":[],"usage":[1]}',
    "[[[[" * 50_000 + "]]]]" * 50_000,
]


@pytest.mark.parametrize("payload", OPENAI_WRONG_TYPES, ids=lambda p: p[:40])
async def test_openai_fields_of_the_wrong_type_are_malformed_streams(payload: str) -> None:
    body = chunk({"role": "assistant", "content": ""}) + f"data: {payload}\n\n" + chunk({}, finish="stop")
    with pytest.raises(MalformedStreamError):
        await collect(openai_model(Server(sse(body + "data: [DONE]\n\n")), Sleeps(), max_retries=0), HELLO)


def anthropic_body(*middle: str) -> str:
    return start(5) + "".join(middle) + finish("end_turn", 1)


ANTHROPIC_BROKEN = {
    "type is a number": raw_event("x", '{"type":5}'),
    "index is a list": raw_block_start('{"type":"text","text":""}', index="[0]"),
    "index is a string": raw_block_start('{"type":"text","text":""}', index='"0"'),
    "content_block is a string": raw_block_start('"text"'),
    "text is a number": raw_block_start('{"type":"text","text":3}'),
    "input is a list": raw_block_start('{"type":"tool_use","id":"t","name":"f","input":[]}'),
    "usage is a string": raw_event("message_delta", '{"type":"message_delta","delta":{},"usage":"lots"}'),
    "output_tokens is a string": raw_event("message_delta", '{"type":"message_delta","usage":{"output_tokens":"x"}}'),
    "delta text is null": open_block(text_block(0)) + raw_text_delta("null"),
    "input_json_delta aimed at a text block": open_block(text_block(0, "Hi"))
    + event({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}}),
    "text_delta aimed at a tool block": open_block(tool_block(0, "t1", "f"))
    + event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}),
    "reused block index": text_block(0, "a") + text_block(0, "b"),
    "delta after the block stopped": text_block(0, "a")
    + event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "b"}}),
    "stop of an unknown block": event({"type": "content_block_stop", "index": 3}),
    "second message_start": start(1),
    "error is a string": raw_event("error", '{"type":"error","error":"boom"}'),
}


@pytest.mark.parametrize("middle", ANTHROPIC_BROKEN.values(), ids=ANTHROPIC_BROKEN.keys())
async def test_anthropic_broken_streams_are_typed_model_errors(middle: str) -> None:
    with pytest.raises(ModelError) as raised:
        await collect(anthropic_model(Server(sse(anthropic_body(middle))), Sleeps(), max_retries=0), HELLO)
    assert isinstance(raised.value, MalformedStreamError) or "boom" in str(raised.value)


async def test_anthropic_a_string_error_event_is_a_typed_server_error() -> None:
    body = start(5) + raw_event("error", '{"type":"error","error":"boom"}')
    with pytest.raises(ServerError, match="boom"):
        await collect(anthropic_model(Server(sse(body)), Sleeps(), max_retries=0), HELLO)


async def test_openai_a_stream_of_only_done_is_malformed() -> None:
    with pytest.raises(MalformedStreamError, match="before any choice"):
        await collect(openai_model(Server(sse("data: [DONE]\n\n")), Sleeps(), max_retries=0), HELLO)


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
async def test_a_body_that_cannot_be_decoded_is_a_malformed_stream(adapter: str) -> None:
    bad_gzip = httpx.Response(
        200,
        headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
        stream=Trickle(b"not gzip at all", b"", every=0, times=0),
    )
    server = Server(bad_gzip)
    make = openai_model if adapter == "openai" else anthropic_model
    chosen = make(server, Sleeps(), max_retries=0)
    with pytest.raises(MalformedStreamError, match="could not be decoded"):
        await collect(chosen, HELLO)


class EndlessLine(httpx.AsyncByteStream):
    """A ``data:`` line that never ends, sent in 64 KiB pieces."""

    def __init__(self) -> None:
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'data: {"choices":"'
        while True:
            self.sent += 65536
            yield b"x" * 65536
            await trio.sleep(0)


async def test_a_line_past_the_limit_is_malformed_instead_of_buffered_without_bound() -> None:
    body = EndlessLine()
    with trio.fail_after(60), pytest.raises(MalformedStreamError, match="longer than"):
        await collect(openai_model(Server(httpx.Response(200, stream=body)), Sleeps(), max_retries=0), HELLO)
    assert MAX_SSE_LINE_BYTES <= body.sent <= MAX_SSE_LINE_BYTES + 2 * 65536


# -- tool-call fragments and ids ---------------------------------------------------------------


async def test_openai_fragments_without_index_continue_one_call() -> None:
    body = chunk({"role": "assistant", "content": None})
    body += chunk({"tool_calls": [{"id": "call_A", "type": "function", "function": {"name": "f", "arguments": ""}}]})
    body += chunk({"tool_calls": [{"function": {"arguments": '{"a":'}}]})
    body += chunk({"tool_calls": [{"function": {"arguments": " 1}"}}]})
    body += chunk({"tool_calls": [{"id": "call_B", "function": {"name": "g", "arguments": "{}"}}]})
    body += chunk({"tool_calls": [{"id": "call_B", "function": {"arguments": ""}}]})
    body += chunk({}, finish="tool_calls") + "data: [DONE]\n\n"
    events = await collect(openai_model(Server(sse(body))), HELLO)
    assert events[:2] == [ToolCallStreamEvent("call_A", "f"), ToolCallStreamEvent("call_B", "g")]
    assert completed(events).tool_calls == (ToolCall("call_A", "f", {"a": 1}), ToolCall("call_B", "g", {}))


async def test_openai_numeric_tool_call_ids_become_strings() -> None:
    body = chunk({"tool_calls": [{"index": 0, "id": 7, "function": {"name": "f", "arguments": "{}"}}]})
    body += chunk({}, finish="tool_calls") + "data: [DONE]\n\n"
    events = await collect(openai_model(Server(sse(body))), HELLO)
    assert events[0] == ToolCallStreamEvent("7", "f")
    assert completed(events).tool_calls == (ToolCall("7", "f", {}),)


@pytest.mark.parametrize("call_id", [None, "", True, [1]], ids=["missing", "empty", "bool", "list"])
async def test_openai_tool_calls_without_a_usable_id_are_malformed(call_id: object) -> None:
    start_call: dict[str, Any] = {"index": 0, "function": {"name": "f", "arguments": "{}"}}
    if call_id is not None:
        start_call["id"] = call_id
    body = chunk({"tool_calls": [start_call]}) + chunk({}, finish="tool_calls") + "data: [DONE]\n\n"
    with pytest.raises(MalformedStreamError, match="id"):
        await collect(openai_model(Server(sse(body)), Sleeps(), max_retries=0), HELLO)


async def test_openai_two_calls_with_one_id_are_malformed() -> None:
    body = chunk({"tool_calls": [{"index": 0, "id": "same", "function": {"name": "f", "arguments": "{}"}}]})
    body += chunk({"tool_calls": [{"index": 1, "id": "same", "function": {"name": "g", "arguments": "{}"}}]})
    body += chunk({}, finish="tool_calls") + "data: [DONE]\n\n"
    with pytest.raises(MalformedStreamError, match="same"):
        await collect(openai_model(Server(sse(body)), Sleeps(), max_retries=0), HELLO)


async def test_anthropic_numeric_tool_use_ids_become_strings() -> None:
    block = {"type": "tool_use", "id": 42, "name": "f", "input": {"q": "x"}}
    body = anthropic_body(
        event({"type": "content_block_start", "index": 0, "content_block": block}),
        event({"type": "content_block_stop", "index": 0}),
    )
    events = await collect(anthropic_model(Server(sse(body))), HELLO)
    assert events[0] == ToolCallStreamEvent("42", "f")
    assert completed(events).tool_calls == (ToolCall("42", "f", {"q": "x"}),)


@pytest.mark.parametrize("call_id", [None, "", {"a": 1}], ids=["missing", "empty", "object"])
async def test_anthropic_tool_use_without_a_usable_id_is_malformed(call_id: object) -> None:
    block: dict[str, Any] = {"type": "tool_use", "name": "f", "input": {}}
    if call_id is not None:
        block["id"] = call_id
    body = anthropic_body(
        event({"type": "content_block_start", "index": 0, "content_block": block}),
        event({"type": "content_block_stop", "index": 0}),
    )
    with pytest.raises(MalformedStreamError, match="id"):
        await collect(anthropic_model(Server(sse(body)), Sleeps(), max_retries=0), HELLO)


# -- retry-after on every retried status -------------------------------------------------------


@pytest.mark.parametrize(("status", "kind"), [(503, "server_error"), (529, "overloaded_error"), (500, "api_error")])
async def test_retry_after_is_honoured_on_every_retried_status(status: int, kind: str) -> None:
    failed = error(status, {"type": "error", "error": {"type": kind, "message": "busy"}}, {"retry-after": "7"})
    server = Server(failed, sse(ANTHROPIC_TEXT))
    sleeps = Sleeps()
    events = await collect(anthropic_model(server, sleeps), HELLO)
    assert completed(events) == AssistantMessage("Hello!")
    assert sleeps.delays == [7.0]


async def test_server_errors_carry_their_retry_after() -> None:
    limited = error(503, {"error": {"message": "busy", "type": "server_error"}}, {"retry-after-ms": "1500"})
    server = Server(limited, limited, limited)
    sleeps = Sleeps()
    with pytest.raises(ServerError) as raised:
        await collect(openai_model(server, sleeps), HELLO)
    assert raised.value.retry_after == 1.5
    assert sleeps.delays == [1.5, 1.5]
    assert not isinstance(raised.value, RateLimitError)


async def test_usage_still_reads_from_well_formed_streams() -> None:
    events = await collect(openai_model(Server(sse(OPENAI_TEXT))), HELLO)
    assert events[-1] == ResponseCompletedEvent(AssistantMessage("Hello, world!"), Usage(19, 4, 0), "end_turn", "stop")


async def test_error_messages_from_the_provider_are_cleaned() -> None:
    body = '{"error":{"type":"server_error","message":"bad \\ud83d input"}}'
    failed = httpx.Response(400, headers={"content-type": "application/json"}, content=body.encode())
    with pytest.raises(ModelError) as raised:
        await collect(openai_model(Server(failed), Sleeps(), max_retries=0), HELLO)
    assert "bad \ufffd input" in str(raised.value)
    str(raised.value).encode("utf-8")
    in_stream = 'data: {"error":{"type":"invalid_request_error","message":"x\\udcff"}}\n\n'
    with pytest.raises(ModelError) as raised:
        await collect(openai_model(Server(sse(in_stream)), Sleeps(), max_retries=0), HELLO)
    assert str(raised.value).endswith("x\ufffd")


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("hint", ["1e400", "inf", "nan", "-5"])
async def test_a_retry_after_that_is_not_a_finite_wait_is_not_obeyed(status: int, hint: str) -> None:
    from orchestrator.providers import RetryPolicy

    failed = error(status, {"error": {"message": "busy", "type": "server_error"}}, {"retry-after": hint})
    sleeps = Sleeps()
    server = Server(failed, sse(OPENAI_TEXT))
    events = await collect(openai_model(server, sleeps, retry=RetryPolicy(total_timeout=None)), HELLO)
    assert completed(events).content == "Hello, world!"
    assert len(sleeps.delays) == 1 and 0 <= sleeps.delays[0] <= 1

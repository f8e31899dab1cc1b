"""Recorded provider streams, mutated: each adapter gives a well-formed response or a ModelError.

Hypothesis takes the recorded streams of every adapter and breaks them as a
hostile or faulty provider would: a field given a value of another type, an
event dropped, duplicated or moved, the body cut short, bytes flipped, and the
body delivered in arbitrary pieces (splitting lines and UTF-8 characters).
Whatever comes out must be either a ModelError subclass or a well-formed
stream: text deltas that add up to the message, one completed event at the
end, tool calls with unique non-empty string ids that were all announced, and
nothing that cannot be encoded as UTF-8. Deterministic (derandomized) and
bounded in examples and in time.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import ModelError
from orchestrator.messages import UserMessage
from orchestrator.model import (
    STOP_REASONS,
    ModelEvent,
    ModelRequest,
    ReasoningDeltaEvent,
    ResponseCompletedEvent,
    TextDeltaEvent,
    ToolCallStreamEvent,
)
from orchestrator.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel
from orchestrator.providers.base import HTTPStreamingModel

RECORDED = Path(__file__).parent.parent / "fixtures" / "providers"
STREAMS = {
    "openai": [
        (RECORDED / name).read_text() for name in ("openai_text.sse", "openai_tools.sse", "openai_reasoning.sse")
    ],
    "anthropic": [
        (RECORDED / name).read_text()
        for name in ("anthropic_text.sse", "anthropic_tools.sse", "anthropic_thinking.sse")
    ],
    "responses": [
        (RECORDED / name).read_text()
        for name in ("openai_responses_text.sse", "openai_responses_tools.sse", "openai_responses_reasoning.sse")
    ],
    # Events are split at blank lines below: the CRLF-framed recording is read with LF line ends.
    "gemini": [
        (RECORDED / name).read_text().replace("\r\n", "\n")
        for name in ("gemini_text.sse", "gemini_tools.sse", "gemini_reasoning.sse")
    ],
}
REQUEST = ModelRequest([UserMessage("weather in Paris and time in Oslo?")])

#: Values a field is replaced with: every JSON type, plausible-but-wrong values, a lone surrogate.
WRONG_VALUES: list[Any] = [
    None, 0, 1, 2, -1, 1.5, 10**30, True, "", "x", "\ud83d", "text", "tool_use", "text_delta",
    "input_json_delta", "content_block_stop", "message_stop", "ping", "stop", [], [1], {}, {"type": "text"},
]  # fmt: skip

settings_for_streams = settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Pieces(httpx.AsyncByteStream):
    """The body in the given pieces."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside a JSON value, the value itself included, deepest first."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found.extend(paths(inner, (*prefix, key)))
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            found.extend(paths(inner, (*prefix, position)))
    return sorted(found, key=len, reverse=True)


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = replaced(copy[head], rest, new)
    return copy


def events_of(body: str) -> list[str]:
    return [block for block in body.split("\n\n") if block.strip()]


def retype(draw: st.DrawFn, blocks: list[str]) -> list[str]:
    """One field of one event's JSON gets a value of another type."""
    candidates = [i for i, block in enumerate(blocks) if "data: {" in block]
    if not candidates:
        return blocks
    position = draw(st.sampled_from(candidates))
    head, _, data = blocks[position].partition("data: ")
    value = json.loads(data)
    path = draw(st.sampled_from(paths(value)))
    new = replaced(value, path, draw(st.sampled_from(WRONG_VALUES)))
    return [*blocks[:position], head + "data: " + json.dumps(new), *blocks[position + 1 :]]


def split_string(draw: st.DrawFn, blocks: list[str]) -> list[str]:
    """An event sent twice, one of its strings split between the copies at any UTF-16 code
    unit, as a provider splits text between deltas (a surrogate pair may be cut in half)."""
    candidates = [i for i, block in enumerate(blocks) if "data: {" in block]
    if not candidates:
        return blocks
    position = draw(st.sampled_from(candidates))
    head, _, data = blocks[position].partition("data: ")
    value = json.loads(data)
    strings = [path for path in paths(value) if isinstance(lookup(value, path), str)]
    if not strings:
        return blocks
    path = draw(st.sampled_from(strings))
    units = lookup(value, path).encode("utf-16-le", "surrogatepass")
    cut = 2 * draw(st.integers(0, len(units) // 2))
    first, second = (units[:cut], units[cut:])
    halves = [
        head + "data: " + json.dumps(replaced(value, path, half.decode("utf-16-le", "surrogatepass")))
        for half in (first, second)
    ]
    return [*blocks[:position], *halves, *blocks[position + 1 :]]


def lookup(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def drop(draw: st.DrawFn, blocks: list[str]) -> list[str]:
    if not blocks:
        return blocks
    position = draw(st.integers(0, len(blocks) - 1))
    return blocks[:position] + blocks[position + 1 :]


def duplicate(draw: st.DrawFn, blocks: list[str]) -> list[str]:
    if not blocks:
        return blocks
    position = draw(st.integers(0, len(blocks) - 1))
    return blocks[: position + 1] + blocks[position:]


def move(draw: st.DrawFn, blocks: list[str]) -> list[str]:
    if len(blocks) < 2:
        return blocks
    source = draw(st.integers(0, len(blocks) - 1))
    moved = blocks[:source] + blocks[source + 1 :]
    target = draw(st.integers(0, len(moved)))
    return [*moved[:target], blocks[source], *moved[target:]]


EVENT_MUTATIONS: list[Callable[[st.DrawFn, list[str]], list[str]]] = [
    retype, retype, split_string, drop, duplicate, move,
]  # fmt: skip


@st.composite
def mutated_body(draw: st.DrawFn, adapter: str) -> list[bytes]:
    """A recorded stream after one to three mutations, cut into pieces at arbitrary bytes."""
    blocks = events_of(draw(st.sampled_from(STREAMS[adapter])))
    for _ in range(draw(st.integers(1, 3))):
        blocks = draw(st.sampled_from(EVENT_MUTATIONS))(draw, blocks)
    body = bytearray("".join(block + "\n\n" for block in blocks).encode())
    damage = draw(st.sampled_from(["none", "none", "none", "cut", "flip"]))
    if body and damage == "cut":
        del body[draw(st.integers(0, len(body) - 1)) :]
    if body and damage == "flip":
        body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=6))))
    edges = [0, *cuts, len(body)]
    return [bytes(body[a:b]) for a, b in itertools.pairwise(edges)]


def encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def assert_well_formed(events: list[ModelEvent]) -> None:
    assert events, "a stream that ends without an error must complete"
    *streamed, last = events
    assert isinstance(last, ResponseCompletedEvent), f"last event is {last!r}"
    assert not any(isinstance(e, ResponseCompletedEvent) for e in streamed)
    message = last.message
    deltas = [e.text for e in streamed if isinstance(e, TextDeltaEvent)]
    assert all(deltas), "no empty text deltas"
    assert "".join(deltas) == message.content
    assert encodes(message.content)
    ids = [call.id for call in message.tool_calls]
    assert all(isinstance(i, str) and i for i in ids), ids
    assert len(set(ids)) == len(ids), ids
    announced = sorted((e.id, e.name) for e in streamed if isinstance(e, ToolCallStreamEvent))
    assert announced == sorted((call.id, call.name) for call in message.tool_calls)
    for call in message.tool_calls:
        assert encodes(call.id) and encodes(call.name)
        assert encodes(json.dumps(dict(call.arguments), ensure_ascii=False))
    thoughts = [e.text for e in streamed if isinstance(e, ReasoningDeltaEvent)]
    assert all(thoughts), "no empty reasoning deltas"
    assert "".join(thoughts) == "".join(block.text for block in message.reasoning)
    for block in message.reasoning:
        assert all(encodes(part) for part in (block.text, block.signature or "", block.data or "", block.id or ""))
    assert last.stop_reason is None or last.stop_reason in STOP_REASONS
    assert last.raw_stop_reason is None or (isinstance(last.raw_stop_reason, str) and encodes(last.raw_stop_reason))
    if last.usage is not None:
        assert last.usage.input_tokens >= 0 and last.usage.output_tokens >= 0
        for cached in (last.usage.cache_read_tokens, last.usage.cache_write_tokens):
            assert cached is None or (isinstance(cached, int) and cached >= 0)


async def run_adapter(adapter: str, pieces: list[bytes]) -> list[ModelEvent] | ModelError:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Pieces(pieces))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    model: HTTPStreamingModel
    if adapter == "openai":
        model = OpenAIChatModel("gpt-4o-mini", api_key="k", client=client, max_retries=0)
    elif adapter == "responses":
        model = OpenAIResponsesModel("gpt-5-mini", api_key="k", client=client, max_retries=0)
    elif adapter == "gemini":
        model = GeminiModel("gemini-2.5-flash", api_key="k", client=client, max_retries=0)
    else:
        model = AnthropicModel("claude-sonnet-4-5", api_key="k", client=client, max_retries=0)
    events: list[ModelEvent] = []
    try:
        with trio.fail_after(10):
            async for item in model.stream(REQUEST):
                events.append(item)
    except ModelError as error:
        return error
    finally:
        await client.aclose()
    return events


def check(adapter: str, pieces: list[bytes]) -> None:
    outcome = trio.run(run_adapter, adapter, pieces)
    if isinstance(outcome, ModelError):
        assert str(outcome), "a ModelError says what went wrong"
        return
    assert_well_formed(outcome)


@pytest.mark.parametrize("adapter", ["openai", "anthropic", "responses", "gemini"])
def test_the_recorded_streams_themselves_are_well_formed(adapter: str) -> None:
    for body in STREAMS[adapter]:
        outcome = trio.run(run_adapter, adapter, [body.encode()])
        assert not isinstance(outcome, ModelError), outcome
        assert_well_formed(outcome)
    tools = trio.run(run_adapter, adapter, [STREAMS[adapter][1].encode()])
    assert not isinstance(tools, ModelError)
    completed = tools[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert "\U0001f600" in completed.message.content
    assert [call.name for call in completed.message.tool_calls] == ["get_weather", "get_time"]
    reasoned = trio.run(run_adapter, adapter, [STREAMS[adapter][2].encode()])
    assert not isinstance(reasoned, ModelError)
    last = reasoned[-1]
    assert isinstance(last, ResponseCompletedEvent)
    assert last.message.reasoning and last.message.reasoning[0].text.endswith("\U0001f600")
    assert last.usage is not None and last.usage.cache_read_tokens


@settings_for_streams
@given(pieces=mutated_body("openai"))
def test_mutated_chat_completions_streams_give_a_response_or_a_model_error(pieces: list[bytes]) -> None:
    check("openai", pieces)


@settings_for_streams
@given(pieces=mutated_body("anthropic"))
def test_mutated_anthropic_streams_give_a_response_or_a_model_error(pieces: list[bytes]) -> None:
    check("anthropic", pieces)


@settings_for_streams
@given(pieces=mutated_body("responses"))
def test_mutated_responses_api_streams_give_a_response_or_a_model_error(pieces: list[bytes]) -> None:
    check("responses", pieces)


@settings_for_streams
@given(pieces=mutated_body("gemini"))
def test_mutated_gemini_streams_give_a_response_or_a_model_error(pieces: list[bytes]) -> None:
    check("gemini", pieces)

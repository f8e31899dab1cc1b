"""OpenAIChatModel: finish reasons, reasoning effort and streamed reasoning, cached tokens, on a mock transport."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from provider_mock import Server, collect, sse

from orchestrator import AssistantMessage, ReasoningBlock, SystemMessage, UserMessage, create_agent, tool
from orchestrator import events as ev
from orchestrator.model import ModelRequest, ReasoningDeltaEvent, ResponseCompletedEvent, TextDeltaEvent, Usage
from orchestrator.providers import MalformedStreamError, OpenAIChatModel
from orchestrator.runtime.tool_runner import CUT_OFF


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    payload = {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "created": 1718000100,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def usage_chunk(usage: dict[str, Any]) -> str:
    payload = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


DONE = "data: [DONE]\n\n"
USAGE = usage_chunk({"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35})


def text_stream(text: str, finish: str = "stop") -> str:
    return chunk({"role": "assistant", "content": ""}) + chunk({"content": text}) + chunk({}, finish) + USAGE + DONE


def call_chunks(index: int, call_id: str, name: str, arguments: str) -> str:
    opening = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    more = {"index": index, "function": {"arguments": arguments}}
    return chunk({"tool_calls": [opening]}) + chunk({"tool_calls": [more]})


def model(server: Server, **options: Any) -> OpenAIChatModel:
    options.setdefault("api_key", "sk-test")
    return OpenAIChatModel("gpt-4o-mini", client=server.client(), **options)


HELLO = ModelRequest([SystemMessage("Be brief."), UserMessage("Say hello")])
written: list[str] = []


@tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    written.append(path)
    return "written"


async def completed_of(stream: str, **options: Any) -> ResponseCompletedEvent:
    [*_, completed] = await collect(model(Server(sse(stream)), **options), HELLO)
    assert isinstance(completed, ResponseCompletedEvent)
    return completed


# finish reasons ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "content_filter"),
        ("insufficient_system_resource", "other"),
    ],
)
async def test_each_finish_reason_is_normalised_and_the_raw_value_kept(raw: str, normalised: str) -> None:
    completed = await completed_of(text_stream("x", finish=raw))
    assert (completed.stop_reason, completed.raw_stop_reason) == (normalised, raw)


@pytest.mark.parametrize("raw", ["tool_calls", "function_call", "stop"])
async def test_a_response_with_tool_calls_is_tool_use_even_when_the_server_says_stop(raw: str) -> None:
    stream = call_chunks(0, "call_1", "write_file", '{"path": "a", "text": "b"}') + chunk({}, raw) + USAGE + DONE
    completed = await completed_of(stream)
    assert (completed.stop_reason, completed.raw_stop_reason) == ("tool_use", raw)


async def test_a_streamed_refusal_is_the_answer_text_and_the_stop_reason_is_refusal() -> None:
    stream = (
        chunk({"role": "assistant", "content": None, "refusal": ""})
        + chunk({"refusal": "I can't help with "})
        + chunk({"refusal": "that."})
        + chunk({}, "stop")
        + USAGE
        + DONE
    )
    events = await collect(model(Server(sse(stream))), HELLO)
    assert events[:2] == [TextDeltaEvent("I can't help with "), TextDeltaEvent("that.")]
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.message == AssistantMessage("I can't help with that.")
    assert (completed.stop_reason, completed.raw_stop_reason) == ("refusal", "stop")


async def test_a_finish_reason_that_is_not_text_is_a_malformed_stream() -> None:
    stream = chunk({"content": "x"}) + chunk({}, 3) + DONE  # type: ignore[arg-type]
    with pytest.raises(MalformedStreamError, match="finish_reason"):
        await collect(model(Server(sse(stream)), max_retries=0), HELLO)


async def test_tool_calls_cut_off_at_the_length_limit_are_not_run_and_the_model_is_told_why() -> None:
    written.clear()
    cut = (
        call_chunks(0, "call_a", "write_file", '{"path": "a.txt", "text": "1"}')
        + call_chunks(1, "call_b", "write_file", '{"path": "b.txt", "te')
        + chunk({}, "length")
        + USAGE
        + DONE
    )
    server = Server(sse(cut), sse(text_stream("One at a time, then.")))
    client = await create_agent(model(server), tools=[write_file])
    with trio.fail_after(10):
        events = [e async for e in client.stream("write two files")]
    assert written == []
    first = next(e for e in events if isinstance(e, ev.ModelCompletedEvent))
    assert (first.stop_reason, first.raw_stop_reason) == ("max_tokens", "length")
    results = [m for m in server.bodies()[1]["messages"] if m["role"] == "tool"]
    assert sorted((m["tool_call_id"], m["content"]) for m in results) == [("call_a", CUT_OFF), ("call_b", CUT_OFF)]
    assert [e.name for e in events].count("tool_failed") == 2
    assert events[-1].name == "run_completed"


# reasoning --------------------------------------------------------------------


async def test_reasoning_effort_is_sent_only_when_given() -> None:
    server = Server(sse(text_stream("a")), sse(text_stream("b")))
    await collect(model(server, reasoning_effort="high"), HELLO)
    await collect(model(server), HELLO)
    given, default = server.bodies()
    assert given["reasoning_effort"] == "high"
    assert "reasoning_effort" not in default
    with pytest.raises(ValueError, match="reasoning_effort"):
        OpenAIChatModel("m", api_key="k", reasoning_effort="")


async def test_streamed_reasoning_content_becomes_reasoning_deltas_and_a_block_of_the_message() -> None:
    stream = (
        chunk({"role": "assistant", "content": None, "reasoning_content": ""})
        + chunk({"reasoning_content": "9.11 < 9.8 because "})
        + chunk({"reasoning_content": "0.11 < 0.8."})
        + chunk({"content": "9.8 is greater."})
        + chunk({}, "stop")
        + USAGE
        + DONE
    )
    events = await collect(model(Server(sse(stream))), HELLO)
    assert events[:3] == [
        ReasoningDeltaEvent("9.11 < 9.8 because "),
        ReasoningDeltaEvent("0.11 < 0.8."),
        TextDeltaEvent("9.8 is greater."),
    ]
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.message == AssistantMessage(
        "9.8 is greater.", reasoning=(ReasoningBlock("9.11 < 9.8 because 0.11 < 0.8."),)
    )


async def test_the_reasoning_alias_is_read_but_never_twice_and_other_shapes_are_left_alone() -> None:
    alias = chunk({"reasoning": "thinking"}) + chunk({"content": "ok"}) + chunk({}, "stop") + DONE
    both = chunk({"reasoning_content": "one", "reasoning": "one"}) + chunk({"content": "ok"}) + chunk({}, "stop") + DONE
    shaped = chunk({"reasoning": {"effort": "low"}}) + chunk({"content": "ok"}) + chunk({}, "stop") + DONE
    assert (await completed_of(alias)).message.reasoning == (ReasoningBlock("thinking"),)
    assert (await completed_of(both)).message.reasoning == (ReasoningBlock("one"),)
    assert (await completed_of(shaped)).message.reasoning == ()


async def test_reasoning_content_that_is_not_text_is_a_malformed_stream() -> None:
    stream = chunk({"reasoning_content": ["x"]}) + chunk({}, "stop") + DONE
    with pytest.raises(MalformedStreamError, match="reasoning_content"):
        await collect(model(Server(sse(stream)), max_retries=0), HELLO)


async def test_reasoning_streams_to_the_agent_and_is_not_sent_back() -> None:
    stream = chunk({"reasoning_content": "hmm"}) + chunk({"content": "Hi."}) + chunk({}, "stop") + USAGE + DONE
    server = Server(sse(stream), sse(text_stream("Again.")))
    client = await create_agent(model(server))
    with trio.fail_after(10):
        events = [e async for e in client.stream("hello")]
        await client.run("again")
    assert [e.text for e in events if isinstance(e, ev.ReasoningDeltaEvent)] == ["hmm"]
    assert server.bodies()[1]["messages"][1] == {"role": "assistant", "content": "Hi."}


# usage ------------------------------------------------------------------------


async def test_cached_prompt_tokens_are_reported_as_cache_reads() -> None:
    usage = {"prompt_tokens": 2006, "completion_tokens": 300, "prompt_tokens_details": {"cached_tokens": 1920}}
    stream = chunk({"content": "x"}) + chunk({}, "stop") + usage_chunk(usage) + DONE
    assert (await completed_of(stream)).usage == Usage(2006, 300, cache_read_tokens=1920)
    assert (await completed_of(text_stream("x"))).usage == Usage(30, 5)  # not reported: None


@pytest.mark.parametrize(
    ("details", "problem"),
    [({"cached_tokens": "1920"}, "cached_tokens"), ([1920], "prompt_tokens_details")],
)
async def test_a_malformed_cached_token_count_is_a_malformed_stream(details: Any, problem: str) -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "prompt_tokens_details": details}
    stream = chunk({"content": "x"}) + chunk({}, "stop") + usage_chunk(usage) + DONE
    with pytest.raises(MalformedStreamError, match=problem):
        await collect(model(Server(sse(stream)), max_retries=0), HELLO)

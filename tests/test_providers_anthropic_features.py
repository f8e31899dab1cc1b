"""AnthropicModel: stop reasons, extended thinking, cache usage and prompt caching, on a mock transport."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from provider_mock import Server, collect, sse

from orchestrator import (
    AssistantMessage,
    ReasoningBlock,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator import events as ev
from orchestrator.model import (
    ModelRequest,
    ReasoningDeltaEvent,
    ResponseCompletedEvent,
    TextDeltaEvent,
    ToolCallStreamEvent,
    Usage,
)
from orchestrator.providers import AnthropicModel, MalformedStreamError
from orchestrator.runtime.tool_runner import CUT_OFF

SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds="
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"


def event(payload: dict[str, Any]) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


def start(usage: dict[str, Any] | None = None) -> str:
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-20250514",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage if usage is not None else {"input_tokens": 50, "output_tokens": 1},
    }
    return event({"type": "message_start", "message": message})


def finish(reason: Any, output_tokens: int = 20) -> str:
    delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}}
    return event({**delta, "usage": {"output_tokens": output_tokens}}) + event({"type": "message_stop"})


def block(index: int, content: dict[str, Any], *deltas: dict[str, Any]) -> str:
    body = event({"type": "content_block_start", "index": index, "content_block": content})
    for delta in deltas:
        body += event({"type": "content_block_delta", "index": index, "delta": delta})
    return body + event({"type": "content_block_stop", "index": index})


def text_block(index: int, text: str) -> str:
    return block(index, {"type": "text", "text": ""}, {"type": "text_delta", "text": text})


def tool_block(index: int, call_id: str, name: str, arguments: str) -> str:
    content = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return block(index, content, {"type": "input_json_delta", "partial_json": arguments})


def thinking_block(index: int, *pieces: str, signature: str = SIGNATURE) -> str:
    deltas = [{"type": "thinking_delta", "thinking": piece} for piece in pieces]
    deltas.append({"type": "signature_delta", "signature": signature})
    return block(index, {"type": "thinking", "thinking": ""}, *deltas)


def redacted_block(index: int, data: str = REDACTED) -> str:
    return block(index, {"type": "redacted_thinking", "data": data})


def answer(text: str) -> str:
    return start() + text_block(0, text) + finish("end_turn")


def model(server: Server, **options: Any) -> AnthropicModel:
    options.setdefault("api_key", "sk-ant-test")
    return AnthropicModel("claude-sonnet-4-20250514", client=server.client(), **options)


HELLO = ModelRequest([SystemMessage("Be brief."), UserMessage("Say hello")])
written: list[str] = []


@tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    written.append(path)
    return "written"


# stop reasons -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "max_tokens"),
        ("refusal", "refusal"),
        ("pause_turn", "other"),
        ("a_reason_from_next_year", "other"),
    ],
)
async def test_each_stop_reason_is_normalised_and_the_raw_value_kept(raw: str, normalised: str) -> None:
    events = await collect(model(Server(sse(start() + text_block(0, "x") + finish(raw)))), HELLO)
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert (completed.stop_reason, completed.raw_stop_reason) == (normalised, raw)


async def test_a_tool_use_stop_is_tool_use_and_a_stream_without_a_stop_reason_leaves_it_to_the_runtime() -> None:
    calls = start() + tool_block(0, "toolu_1", "write_file", '{"path": "a", "text": "b"}') + finish("tool_use")
    silent = start() + text_block(0, "x") + finish(None)
    server = Server(sse(calls), sse(silent))
    [*_, with_calls] = await collect(model(server), HELLO)
    [*_, without] = await collect(model(server), HELLO)
    assert isinstance(with_calls, ResponseCompletedEvent) and isinstance(without, ResponseCompletedEvent)
    assert (with_calls.stop_reason, with_calls.raw_stop_reason) == ("tool_use", "tool_use")
    assert (without.stop_reason, without.raw_stop_reason) == (None, None)


async def test_a_stop_reason_that_is_not_text_is_a_malformed_stream() -> None:
    with pytest.raises(MalformedStreamError, match="stop_reason"):
        await collect(model(Server(sse(start() + text_block(0, "x") + finish(7))), max_retries=0), HELLO)


async def test_a_tool_call_cut_off_at_max_tokens_is_not_run_and_the_model_is_told_why() -> None:
    written.clear()
    cut = (
        start()
        + text_block(0, "Writing both.")
        + tool_block(1, "toolu_a", "write_file", '{"path": "a.txt", "text": "1"}')
        + tool_block(2, "toolu_b", "write_file", '{"path": "b.txt", "te')
        + finish("max_tokens", 4096)
    )
    server = Server(sse(cut), sse(answer("I will write one file at a time.")))
    client = await create_agent(model(server), tools=[write_file])
    with trio.fail_after(10):
        events = [e async for e in client.stream("write two files")]
    assert written == []
    first = next(e for e in events if isinstance(e, ev.ModelCompletedEvent))
    assert (first.stop_reason, first.raw_stop_reason) == ("max_tokens", "max_tokens")
    assert first.message.tool_calls[1].invalid_arguments == '{"path": "b.txt", "te'
    results = server.bodies()[1]["messages"][-1]["content"]
    assert results[-1].pop("cache_control") == EPHEMERAL["cache_control"]
    assert sorted(results, key=lambda r: r["tool_use_id"]) == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": CUT_OFF, "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": CUT_OFF, "is_error": True},
    ]
    assert events[-1].name == "run_completed"


# extended thinking ------------------------------------------------------------

EPHEMERAL = {"cache_control": {"type": "ephemeral"}}


def test_a_thinking_budget_outside_what_the_api_accepts_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="at least 1024 and below max_tokens"):
        AnthropicModel("m", api_key="k", thinking_budget=1000)
    with pytest.raises(ValueError, match="below max_tokens"):
        AnthropicModel("m", api_key="k", thinking_budget=4096, max_tokens=4096)
    with pytest.raises(TypeError, match="thinking_budget must be an int"):
        AnthropicModel("m", api_key="k", thinking_budget="2048")  # type: ignore[arg-type]


async def test_thinking_budget_sends_thinking_enabled_and_thinking_streams_as_reasoning_deltas() -> None:
    stream = (
        start()
        + thinking_block(0, "The user wants ", "a file.")
        + redacted_block(1)
        + text_block(2, "On it.")
        + tool_block(3, "toolu_1", "write_file", '{"path": "a", "text": "b"}')
        + finish("tool_use")
    )
    server = Server(sse(stream))
    events = await collect(model(server, thinking_budget=2048, max_tokens=8000), HELLO)
    body = server.bodies()[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 8000
    assert events[:4] == [
        ReasoningDeltaEvent("The user wants "),
        ReasoningDeltaEvent("a file."),
        TextDeltaEvent("On it."),
        ToolCallStreamEvent("toolu_1", "write_file"),
    ]
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.message.reasoning == (
        ReasoningBlock("The user wants a file.", signature=SIGNATURE),
        ReasoningBlock(data=REDACTED),
    )


async def test_thinking_blocks_go_back_first_in_their_assistant_turn_exactly_as_they_came() -> None:
    written.clear()
    stream = (
        start()
        + thinking_block(0, "Plan: write a.", signature="sig-part-1")  # signatures may come in pieces
        + redacted_block(1)
        + text_block(2, "Writing.")
        + tool_block(3, "toolu_1", "write_file", '{"path": "a", "text": "b"}')
        + finish("tool_use")
    )
    server = Server(
        sse(stream), sse(start() + thinking_block(0, "Done.") + text_block(1, "Written.") + finish("end_turn"))
    )
    client = await create_agent(model(server, thinking_budget=1024), tools=[write_file])
    with trio.fail_after(10):
        events = [e async for e in client.stream("write a")]
    assert written == ["a"]
    thoughts = [e.text for e in events if isinstance(e, ev.ReasoningDeltaEvent)]
    assert thoughts == ["Plan: write a.", "Done."]
    assistant = server.bodies()[1]["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Plan: write a.", "signature": "sig-part-1"},
            {"type": "redacted_thinking", "data": REDACTED},
            {"type": "text", "text": "Writing."},
            {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {"path": "a", "text": "b"}},
        ],
    }
    [kept] = [m for m in client.agent.history.load("default") if isinstance(m, AssistantMessage) and m.tool_calls]
    assert kept.reasoning[0] == ReasoningBlock("Plan: write a.", signature="sig-part-1")


async def test_reasoning_is_left_out_when_thinking_is_off_or_was_never_signed() -> None:
    history = [
        UserMessage("go"),
        AssistantMessage(
            "ok",
            (ToolCall("t1", "write_file", {"path": "a", "text": "b"}),),
            reasoning=(
                ReasoningBlock("signed", signature="s1"),
                ReasoningBlock("cut short, never signed"),
                ReasoningBlock("another provider's", data="enc", id="rs_1"),
            ),
        ),
        ToolMessage("t1", "write_file", "written"),
    ]
    server = Server(sse(answer("a")), sse(answer("b")))
    await collect(model(server), ModelRequest(history))
    await collect(model(server, thinking_budget=2000), ModelRequest(history))
    off, on = (body["messages"][1]["content"] for body in server.bodies())
    assert [b["type"] for b in off] == ["text", "tool_use"]
    assert on[0] == {"type": "thinking", "thinking": "signed", "signature": "s1"}
    assert [b["type"] for b in on] == ["thinking", "text", "tool_use"]


async def test_thinking_from_extra_body_wins_over_the_budget_option() -> None:
    server = Server(sse(answer("x")))
    adaptive = {"thinking": {"type": "adaptive"}}
    await collect(model(server, thinking_budget=2048, extra_body=adaptive), HELLO)
    assert server.bodies()[0]["thinking"] == {"type": "adaptive"}


@pytest.mark.parametrize(
    ("stream", "problem"),
    [
        (
            start() + block(0, {"type": "text", "text": ""}, {"type": "thinking_delta", "thinking": "x"}),
            "thinking_delta for a text",
        ),
        (
            start() + block(0, {"type": "text", "text": ""}, {"type": "signature_delta", "signature": "x"}),
            "signature_delta for a text",
        ),
        (
            start() + block(0, {"type": "thinking", "thinking": ""}, {"type": "thinking_delta", "thinking": 5}),
            "delta.thinking",
        ),
        (start() + block(0, {"type": "thinking", "thinking": ""}, {"type": "signature_delta"}), "delta.signature"),
        (start() + block(0, {"type": "thinking", "thinking": ["x"]}), "content_block.thinking"),
        (start() + block(0, {"type": "thinking", "thinking": "", "signature": 1}), "content_block.signature"),
        (start() + block(0, {"type": "redacted_thinking"}), "content_block.data"),
        (start({"input_tokens": 5, "cache_read_input_tokens": "many"}), "cache_read_input_tokens"),
        (start({"input_tokens": 5, "cache_creation_input_tokens": -1}), "cache_creation_input_tokens"),
    ],
)
async def test_malformed_thinking_signature_and_usage_fields_are_malformed_streams(stream: str, problem: str) -> None:
    with pytest.raises(MalformedStreamError, match=problem):
        await collect(model(Server(sse(stream + finish("end_turn"))), max_retries=0), HELLO)


# usage and prompt caching -----------------------------------------------------


async def test_cache_reads_and_writes_are_reported_and_counted_in_the_input() -> None:
    usage = {
        "input_tokens": 12,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 4000,
        "output_tokens": 1,
    }
    [*_, completed] = await collect(
        model(Server(sse(start(usage) + text_block(0, "x") + finish("end_turn", 9)))), HELLO
    )
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.usage == Usage(4312, 9, cache_read_tokens=4000, cache_write_tokens=300)
    [*_, plain] = await collect(model(Server(sse(answer("x")))), HELLO)
    assert isinstance(plain, ResponseCompletedEvent)
    assert plain.usage == Usage(50, 20)  # not reported: None, not 0


async def test_prompt_caching_marks_the_system_prompt_and_the_newest_message_by_default() -> None:
    history = [
        SystemMessage("You are careful."),
        UserMessage("go"),
        AssistantMessage("", (ToolCall("t1", "write_file", {"path": "a", "text": "b"}),)),
        ToolMessage("t1", "write_file", "written"),
        ToolMessage("t2", "write_file", "failed", ToolStatus.FAILED),
    ]
    server = Server(sse(answer("x")), sse(answer("y")))
    await collect(model(server), ModelRequest(history, [write_file]))
    await collect(model(server, prompt_caching=False), ModelRequest(history, [write_file]))
    cached, plain = server.bodies()
    assert cached["system"] == [{"type": "text", "text": "You are careful.", **EPHEMERAL}]
    assert cached["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "go"}]}
    assert cached["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "written"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "failed", "is_error": True, **EPHEMERAL},
    ]
    assert json.dumps(cached).count('"cache_control"') == 2  # of the four breakpoints a request may have
    assert "cache_control" not in json.dumps(plain)
    assert plain["system"] == "You are careful."


async def test_without_a_system_prompt_only_the_newest_message_is_marked() -> None:
    server = Server(sse(answer("x")))
    await collect(model(server), ModelRequest([UserMessage("hi")]))
    body = server.bodies()[0]
    assert "system" not in body
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi", **EPHEMERAL}]}]

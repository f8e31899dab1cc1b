"""Stop reasons, reasoning and usage as the runtime streams and records them (any model)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from support import Recorder, asks, call, phases, unchecked

from orchestrator import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    ReasoningBlock,
    ScriptedModel,
    ToolMessage,
    ToolStatus,
    create_agent,
    tool,
)
from orchestrator import events as ev
from orchestrator.model import ModelEvent, ReasoningDeltaEvent, ResponseCompletedEvent, TextDeltaEvent, Usage
from orchestrator.runtime.tool_runner import CUT_OFF
from orchestrator.store.codec import decode_message, encode_message

ran: list[str] = []


@tool
def write_file(path: str, text: str) -> str:
    """Write text to a file."""
    ran.append(path)
    return "written"


async def events_of(client, prompt: str) -> list[ev.AgentEvent]:  # type: ignore[no-untyped-def]
    with trio.fail_after(10):
        return [event async for event in client.stream(prompt)]


def completed(events: list[ev.AgentEvent]) -> list[ev.ModelCompletedEvent]:
    return [e for e in events if isinstance(e, ev.ModelCompletedEvent)]


async def test_a_response_without_a_stop_reason_gets_the_one_its_message_implies() -> None:
    model = ScriptedModel([asks(call("a", "write_file", path="x", text="1")), AssistantMessage("done")])
    client = await create_agent(model, tools=[write_file])
    events = await events_of(client, "go")
    assert [(e.stop_reason, e.raw_stop_reason) for e in completed(events)] == [("tool_use", None), ("end_turn", None)]


async def test_the_stop_reason_usage_and_raw_value_a_model_gives_reach_model_completed() -> None:
    usage = Usage(100, 7, cache_read_tokens=90, cache_write_tokens=0)
    reply = ResponseCompletedEvent(AssistantMessage("cut"), usage, "max_tokens", "length")
    client = await create_agent(ScriptedModel([reply]))
    events = await events_of(client, "go")
    [done] = completed(events)
    assert (done.stop_reason, done.raw_stop_reason, done.usage) == ("max_tokens", "length", usage)
    assert events[-1].name == "run_completed"


async def test_the_calls_of_a_response_cut_off_at_max_tokens_get_failed_results_and_never_run() -> None:
    ran.clear()
    log: list[tuple[str, ...]] = []
    cut = ResponseCompletedEvent(
        asks(call("a", "write_file", path="one", text="1"), call("b", "write_file", path="two", text="tw")),
        stop_reason="max_tokens",
        raw_stop_reason="max_tokens",
    )
    model = ScriptedModel([cut, AssistantMessage("I will write less at once.")])
    client = await create_agent(model, tools=[write_file], extensions=[Recorder(log)])
    events = await events_of(client, "write both")

    assert ran == []  # neither call ran, not even the complete-looking first one
    failed = [e for e in events if isinstance(e, ev.ToolFailedEvent)]
    assert sorted((e.call.id, e.result.content, e.result.status) for e in failed) == [
        ("a", CUT_OFF, ToolStatus.FAILED),
        ("b", CUT_OFF, ToolStatus.FAILED),
    ]
    assert "token limit" in CUT_OFF
    assert sorted(e.name for e in events if e.name.startswith("tool_")) == [
        "tool_failed",
        "tool_failed",
        "tool_started",
        "tool_started",
    ]
    # before_tool (approvals, Plan Mode) and the middleware are never asked about a cut-off call
    assert not [entry for entry in log if entry[1] in ("before_tool", "on_tool_call")]
    assert sorted(entry[1:] for entry in log if entry[1] == "after_tool") == [("after_tool", "a"), ("after_tool", "b")]
    # the model reads the failed results on its next call
    second = model.requests[1].messages[-2:]
    assert sorted((m.tool_call_id, m.status, m.content) for m in second if isinstance(m, ToolMessage)) == [
        ("a", ToolStatus.FAILED, CUT_OFF),
        ("b", ToolStatus.FAILED, CUT_OFF),
    ]
    assert [(e.stop_reason, e.raw_stop_reason) for e in completed(events)] == [
        ("max_tokens", "max_tokens"),
        ("end_turn", None),
    ]
    assert phases(events) == [
        ("idle", "start", "setup"),
        ("setup", "request_model", "awaiting_model"),
        ("awaiting_model", "respond", "awaiting_tool"),
        ("awaiting_tool", "settle_turn", "turn_settled"),
        ("turn_settled", "request_model", "awaiting_model"),
        ("awaiting_model", "answer", "answered"),
        ("answered", "conclude", "concluding"),
        ("concluding", "complete", "completed"),
    ]
    assert not [e for e in events if isinstance(e, ev.TransitionEvent) and e.trigger == "admit_tool"]


async def test_calls_run_again_once_a_later_response_is_not_cut_off() -> None:
    ran.clear()
    cut = ResponseCompletedEvent(asks(call("a", "write_file", path="one", text="1")), stop_reason="max_tokens")
    model = ScriptedModel([cut, asks(call("b", "write_file", path="one", text="1")), AssistantMessage("ok")])
    client = await create_agent(model, tools=[write_file])
    events = await events_of(client, "go")
    assert ran == ["one"]
    assert [e.call.id for e in events if isinstance(e, ev.ToolCompletedEvent)] == ["b"]


class Streams:
    """A model that streams the given events as they are."""

    def __init__(self, *events: object) -> None:
        self.events = events

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        for event in self.events:
            yield event  # type: ignore[misc]


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (ResponseCompletedEvent(AssistantMessage("x"), stop_reason="stop"), "stop_reason 'stop'"),  # type: ignore[arg-type]
        (ResponseCompletedEvent(AssistantMessage("x"), raw_stop_reason=7), "raw_stop_reason is a int"),  # type: ignore[arg-type]
    ],
)
async def test_a_stop_reason_outside_the_contract_fails_the_request_with_a_model_error(
    reply: ResponseCompletedEvent, problem: str
) -> None:
    client = await create_agent(Streams(reply))
    with pytest.raises(ModelError, match=problem), trio.fail_after(10):
        await client.run("go")


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        # messages made without their checks, as a hostile model could hand them over
        (ResponseCompletedEvent(unchecked(AssistantMessage, reasoning=("thought",))), "reasoning of type str"),
        (
            ResponseCompletedEvent(unchecked(AssistantMessage, reasoning=(unchecked(ReasoningBlock, text=5),))),
            "text is a int",
        ),
        (
            ResponseCompletedEvent(
                AssistantMessage(reasoning=(unchecked(ReasoningBlock, text="t", signature=b"s"),))
            ),
            "signature is a bytes",
        ),
        (ResponseCompletedEvent(AssistantMessage("x"), usage={"input_tokens": 1}), "usage of type dict"),  # type: ignore[arg-type]
        (ResponseCompletedEvent(AssistantMessage("x"), usage=unchecked(Usage, input_tokens=-1)), "input_tokens=-1"),
        (
            ResponseCompletedEvent(
                AssistantMessage("x"), usage=unchecked(Usage, input_tokens=1, cache_read_tokens="3")
            ),
            "cache_read_tokens='3'",
        ),
    ],
)
async def test_reasoning_or_usage_of_the_wrong_shape_fails_the_request_with_a_model_error(
    reply: ResponseCompletedEvent, problem: str
) -> None:
    client = await create_agent(Streams(reply))
    with pytest.raises(ModelError, match=problem), trio.fail_after(10):
        await client.run("go")


async def test_streamed_reasoning_that_is_not_text_fails_the_request_with_a_model_error() -> None:
    client = await create_agent(Streams(ReasoningDeltaEvent(b"x"), ResponseCompletedEvent(AssistantMessage())))  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="reasoning of type bytes"), trio.fail_after(10):
        await client.run("go")


async def test_reasoning_streams_as_reasoning_delta_and_stays_in_the_recorded_message() -> None:
    thinking = (
        ReasoningBlock("First, check the file.", signature="sig-1"),
        ReasoningBlock(data="opaque-redacted"),
    )
    message = AssistantMessage("Done it.", reasoning=thinking)
    model = ScriptedModel([message, AssistantMessage("again")])
    client = await create_agent(model)
    events = await events_of(client, "go")
    names = [e.name for e in events]
    assert names.index("reasoning_delta") < names.index("text_delta") < names.index("model_completed")
    assert "".join(e.text for e in events if isinstance(e, ev.ReasoningDeltaEvent)) == "First, check the file."
    [done] = completed(events)
    assert done.message.reasoning == thinking
    [recorded] = [m for m in client.agent.history.load("default") if isinstance(m, AssistantMessage)]
    assert recorded.reasoning == thinking
    assert decode_message(encode_message(recorded)) == recorded  # what session stores keep
    await events_of(client, "next")
    assert model.requests[1].messages[1] == recorded  # sent back on the next call as it was


async def test_reasoning_split_inside_a_surrogate_pair_is_joined_before_it_is_streamed() -> None:
    pieces = [ReasoningDeltaEvent("a\ud83d"), ReasoningDeltaEvent("\ude00b"), TextDeltaEvent("ok")]
    client = await create_agent(Streams(*pieces, ResponseCompletedEvent(AssistantMessage("ok"))))
    events = await events_of(client, "go")
    assert "".join(e.text for e in events if isinstance(e, ev.ReasoningDeltaEvent)) == "a\U0001f600b"


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ('{"role": "assistant", "content": "", "tool_calls": [], "reasoning": "x"}', "'reasoning' must be a list"),
        ('{"role": "assistant", "content": "", "tool_calls": [], "reasoning": [1]}', "must be an object"),
        ('{"role": "assistant", "content": "", "tool_calls": [], "reasoning": [{"text": 1}]}', "'text' must be a str"),
        (
            '{"role": "assistant", "content": "", "tool_calls": [], "reasoning": [{"signature": []}]}',
            "'signature' must be a str",
        ),
    ],
)
def test_stored_reasoning_of_the_wrong_shape_is_undecodable_not_a_crash(stored: str, problem: str) -> None:
    from orchestrator.store.codec import UndecodableMessage

    with pytest.raises(UndecodableMessage, match=problem):
        decode_message(stored)


def test_a_stored_assistant_message_from_before_reasoning_existed_still_decodes() -> None:
    assert decode_message('{"role": "assistant", "content": "hi", "tool_calls": []}') == AssistantMessage("hi")
    assert "reasoning" not in encode_message(AssistantMessage("hi"))

"""The JSON wire format: every event class round-trips, streamed events are numbered, bad input is refused."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import pkgutil
import subprocess
import sys
from typing import Any

import pytest
import trio
from support import asks, call

import orchestrator
from orchestrator import (
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ImagePart,
    ReasoningBlock,
    ScriptedModel,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
    sinks,
    tool,
    wire,
)
from orchestrator import events as ev
from orchestrator import stream as stream_module
from orchestrator.extensions.ask_user import AskUserEvent
from orchestrator.extensions.client_tools import ClientToolCallEvent
from orchestrator.extensions.files.bash import SandboxUnavailableEvent
from orchestrator.extensions.guardrails import GuardrailTrippedEvent
from orchestrator.extensions.plan_mode import (
    EnterPlanModeEvent,
    ExitPlanModeEvent,
    PlanModeEnteredEvent,
    PlanModeExitedEvent,
)
from orchestrator.extensions.sqlite_store import (
    ApprovalResumedEvent,
    PlanModeRestoredEvent,
    StoredMessageUnreadableEvent,
)
from orchestrator.extensions.steering import SteeringMessageEvent
from orchestrator.extensions.tool_approval import ToolApprovalAnsweredEvent, ToolApprovalEvent
from orchestrator.model import Usage

IDS: dict[str, Any] = {"session_id": "s1", "request_id": "r1", "seq": 7, "ts": 1764763200.25}
PICTURE = UserMessage((TextPart("look: "), ImagePart(data=b"\x89PNG\x00\xff", media_type="image/png")))
LINKED = UserMessage((TextPart("and"), ImagePart(url="https://example.org/a.png")))
CALL = ToolCall("c1", "read_file", {"path": "ä.txt", "limits": [1, 2], "nested": {"deep": None}})
RESULT = ToolMessage("c1", "read_file", "contents", ToolStatus.SUCCEEDED)
ANSWER = AssistantMessage("Hé, done", (CALL, ToolCall("c2", "bash", {})))
THOUGHTFUL = AssistantMessage(
    "",
    (CALL,),
    reasoning=(
        ReasoningBlock("Let me réad it.", signature="EqQBCkYIARgCKkB="),
        ReasoningBlock(data="EmwKAhgBEgy3va3pzix/LafPsn4a"),
        ReasoningBlock("summary", id="rs_1", data="gAAAAB..."),
    ),
)

# One rich instance of every event class: a class missing here fails test_every_event_class_has_a_sample.
SAMPLES: list[ev.AgentEvent] = [
    ev.RunStartedEvent(**IDS, input=PICTURE),
    ev.RunStartedEvent(**IDS, input=PICTURE, metadata={"user": "ada", "roles": ["admin"], "limit": 2.5}),
    ev.TransitionEvent(**IDS, machine="request", region="phase", source="idle", trigger="start", dest="setup"),
    ev.ModelStartedEvent(**IDS, iteration=3),
    ev.TextDeltaEvent(**IDS, text=" wörld\n"),
    ev.ModelCompletedEvent(**IDS, message=ANSWER, usage=Usage(12, 5)),
    ev.ModelCompletedEvent(**IDS, message=AssistantMessage("plain")),
    ev.ModelCompletedEvent(
        **IDS,
        message=THOUGHTFUL,
        usage=Usage(1200, 80, cache_read_tokens=1000, cache_write_tokens=0),
        stop_reason="max_tokens",
        raw_stop_reason="max_tokens",
    ),
    ev.ModelCompletedEvent(**IDS, message=AssistantMessage("x"), stop_reason="other", raw_stop_reason="pause_turn"),
    ev.ReasoningDeltaEvent(**IDS, text="Hmm, the file ö"),
    ev.ToolStartedEvent(**IDS, call=CALL),
    ev.ToolCompletedEvent(**IDS, call=CALL, result=RESULT),
    ev.ToolFailedEvent(**IDS, call=CALL, result=ToolMessage("c1", "read_file", "boom", ToolStatus.FAILED)),
    ev.ToolSkippedEvent(**IDS, call=CALL, result=ToolMessage("c1", "read_file", "skipped", ToolStatus.SKIPPED)),
    ev.ToolCancelledEvent(**IDS, call=CALL, result=ToolMessage("c1", "read_file", "x", ToolStatus.CANCELLED)),
    ev.ToolCompletedEvent(
        **IDS,
        call=CALL,
        result=ToolMessage(
            "c1", "read_file", "ok", ToolStatus.SUCCEEDED, {"approved": True, "answered_by": "ada", "edited": False}
        ),
    ),
    ev.MessageAppendedEvent(**IDS, message=SystemMessage("be brief"), index=0),
    ev.MessageAppendedEvent(**IDS, message=RESULT, index=4),
    ev.HistoryReplacedEvent(**IDS, messages=(SystemMessage("s"), PICTURE, LINKED, ANSWER, RESULT, THOUGHTFUL)),
    ev.RunCompletedEvent(**IDS, result=AssistantMessage("bye")),
    ev.RunFailedEvent(**IDS, error=wire.RemoteError("ModelError", "stream ended")),
    ev.RunCancelledEvent(**IDS),
    ev.RunParkedEvent(**IDS, waiting=("c1", "c2")),
    ev.SubagentStartedEvent(
        **IDS, tool_call_id="c1", agent="research", child_session_id="s1:c1", child_request_id="r9", depth=1
    ),
    ev.SubagentCompletedEvent(
        **IDS,
        tool_call_id="c1",
        agent="research",
        child_session_id="s1:c1",
        child_request_id="r9",
        outcome="failed",
        result="research failed: ModelError: boom",
    ),
    ev.RunResumedEvent(**IDS, worker="w1", phase="awaiting_tool"),
    ev.AgentChangedEvent(
        **IDS,
        stored_digest="a" * 64,
        current_digest="b" * 64,
        tools_removed=("charge",),
        extensions_changed=("ToolApprovalExtension",),
        model_before="OpenAIModel:gpt-4o",
        model_after="OpenAIModel:gpt-5",
        policy="refuse",
        outcome="refused",
        reason="on_agent_changed='refuse'",
    ),
    ev.SteeringAcceptedEvent(**IDS, message=UserMessage("stop"), source="external"),
    ev.SteeringAcceptedEvent(**IDS, message=LINKED, source="extension"),
    ev.SteeringAppliedEvent(**IDS, message=UserMessage("stop"), skipped_call_ids=("c2", "c3"), iteration=2),
    ev.CompactionStartedEvent(**IDS, tokens_before=4000),
    ev.CompactionCompletedEvent(**IDS, tokens_before=4000, tokens_after=900, messages_replaced=12),
    ev.ExtensionEvent(**IDS, name="my_progress", payload={"done": 3, "of": [1, 2.5, "x"], "ok": True, "none": None}),
    AskUserEvent(**IDS, tool_call_id="c1", question="Which?", options=("a", "b")),
    ToolApprovalEvent(**IDS, tool_call_id="c1", tool_name="bash", arguments={"command": "ls"}),
    ToolApprovalAnsweredEvent(
        **IDS,
        tool_call_id="c1",
        tool_name="bash",
        approved=True,
        answered_by="ada",
        answered_at=1.5,
        arguments={"command": "ls -l"},
        edited=True,
        reason=None,
    ),
    ClientToolCallEvent(**IDS, tool_call_id="c1", tool_name="confirm", arguments={"colour": "blue"}),
    EnterPlanModeEvent(**IDS, tool_call_id="c1", reason="big change"),
    ExitPlanModeEvent(**IDS, tool_call_id="c1", plan="1. do it"),
    PlanModeEnteredEvent(**IDS, tool_call_id="c1"),
    PlanModeExitedEvent(**IDS, tool_call_id="c1", plan="1. do it"),
    SteeringMessageEvent(**IDS, message=PICTURE),
    ApprovalResumedEvent(**IDS, tool_call_id="c1", response_event="ask_user_response"),
    PlanModeRestoredEvent(**IDS),
    StoredMessageUnreadableEvent(**IDS, row_id=7, reason="not JSON"),
    SandboxUnavailableEvent(**IDS, level="workspace-write", reason="'bwrap' was not found (install bubblewrap)"),
    GuardrailTrippedEvent(**IDS, guardrail="no_secrets", stage="input", reason="asks for a password"),
    ev.MCPServerStartedEvent(
        **IDS, server="files", tools=("files__read", "files__write"), server_info="fs 1.0", protocol_version="v", restarts=2
    ),
    ev.MCPServerFailedEvent(**IDS, server="files", error="did not start within 30 s", stage="connect"),
    ev.UsageLimitReachedEvent(**IDS, limit="tool_calls", on_exhausted="wrap_up"),
    ev.WaitExpiredEvent(
        **IDS, tool_call_id="c1", awaited_event="tool_approval_response", expires_at=1700000000.5, outcome="declined"
    ),
]


def import_every_library_module() -> None:
    """Import each module of the package (those needing a missing optional dependency left out)."""
    for module in pkgutil.walk_packages(orchestrator.__path__, "orchestrator."):
        if module.name.endswith("__main__"):
            continue
        with contextlib.suppress(ImportError):
            importlib.import_module(module.name)


def test_every_library_event_class_is_found_without_importing_anything_else() -> None:
    import_every_library_module()
    everything = set(wire.event_classes(library_only=True))
    fresh = subprocess.run(
        [sys.executable, "-c", "from orchestrator import wire; print(' '.join(wire.event_classes(library_only=True)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    missing = sorted(everything - set(fresh.stdout.split()))
    assert not missing, f"import their modules from wire.BUNDLED_EVENT_MODULES: {missing}"


def test_every_event_class_has_a_sample() -> None:
    import_every_library_module()
    sampled = {type(e) for e in SAMPLES}
    missing = sorted(k.__qualname__ for k in wire.event_classes().values() if k not in sampled)
    assert not missing, f"add a round-trip sample for {missing}"
    assert ev.ExtensionEvent in sampled


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: f"{type(e).__name__}-{e.name}")
def test_every_event_round_trips_through_json(event: ev.AgentEvent) -> None:
    line = wire.dumps(event)
    assert "\n" not in line
    data = json.loads(line)
    assert list(data)[:5] == ["type", "session_id", "request_id", "seq", "ts"]
    assert (data["type"], data["seq"], data["ts"]) == (event.name, 7, 1764763200.25)
    back = wire.decode_event(data)
    assert back == event
    assert type(back) is type(event)
    assert wire.encode_event(back) == data


def test_an_error_is_type_and_message_never_a_repr() -> None:
    error = KeyError("missing")
    data = wire.encode_event(ev.RunFailedEvent(**IDS, error=error))
    assert data["error"] == {"type": "KeyError", "message": "'missing'"}
    back = wire.decode_event(data)
    assert isinstance(back, ev.RunFailedEvent)
    assert isinstance(back.error, wire.RemoteError)
    assert (back.error.type_name, back.error.message) == ("KeyError", "'missing'")
    assert wire.encode_event(back) == data


def test_an_error_whose_str_fails_still_encodes() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert wire.encode_error(Broken()) == {"type": "Broken", "message": ""}


def test_images_travel_as_base64() -> None:
    data = wire.encode_message(PICTURE)
    assert data["content"][1] == {"type": "image", "url": None, "data": "iVBORwD/", "media_type": "image/png"}
    assert wire.decode_message(data) == PICTURE


def test_an_unknown_type_decodes_to_an_extension_event() -> None:
    flat = wire.decode_event({"type": "from_the_future", "seq": 2, "level": 3})
    assert flat == ev.ExtensionEvent(name="from_the_future", payload={"level": 3}, seq=2)
    nested = wire.decode_event({"type": "mine", "payload": {"a": 1}})
    assert nested == ev.ExtensionEvent(name="mine", payload={"a": 1})


def test_extension_payload_values_without_json_form_are_written_as_text() -> None:
    event = ev.ExtensionEvent(name="x", payload={"nan": float("nan"), "set": {2, 1}, "obj": object, "msg": RESULT})
    data = json.loads(wire.dumps(event))
    assert data["payload"]["nan"] == "nan"
    assert data["payload"]["set"] == [1, 2]
    assert data["payload"]["obj"] == "<class 'object'>"
    assert data["payload"]["msg"]["role"] == "tool"


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ([], "event"),
        ({"seq": 1}, "event.type"),
        ({"type": "text_delta", "text": 5}, "text_delta.text"),
        ({"type": "text_delta"}, "text_delta.text"),
        ({"type": "text_delta", "text": "a", "seq": "1"}, "event.seq"),
        ({"type": "text_delta", "text": "a", "seq": True}, "event.seq"),
        ({"type": "text_delta", "text": "a", "extra": 1}, "text_delta"),
        ({"type": "run_started", "input": {"role": "robot"}}, "run_started.input.role"),
        (
            {"type": "run_started", "input": {"role": "user", "content": [{"type": "video"}]}},
            "run_started.input.content[0].type",
        ),
        (
            {"type": "run_started", "input": {"role": "user", "content": [{"type": "image", "data": "%%"}]}},
            "run_started.input.content[0].data",
        ),
        (
            {"type": "run_started", "input": {"role": "user", "content": [{"type": "image"}]}},
            "run_started.input.content[0]",
        ),
        ({"type": "model_completed", "message": {"role": "user", "content": "x"}}, "model_completed.message.role"),
        (
            {"type": "tool_started", "call": {"id": "c", "name": "n", "arguments": [1]}},
            "tool_started.call.arguments",
        ),
        (
            {
                "type": "tool_completed",
                "call": {"id": "c", "name": "n"},
                "result": {"role": "tool", "tool_call_id": "c", "name": "n", "content": "", "status": "fine"},
            },
            "tool_completed.result.status",
        ),
        (
            {"type": "steering_accepted", "message": {"role": "user", "content": "x"}, "source": "elsewhere"},
            "steering_accepted.source",
        ),
        ({"type": "run_failed", "error": "boom"}, "run_failed.error"),
        (
            {"type": "model_completed", "message": {"role": "assistant"}, "usage": {"input_tokens": "1"}},
            "model_completed.usage",
        ),
        (
            {"type": "model_completed", "message": {"role": "assistant"}, "usage": {"cache_read_tokens": "9"}},
            "model_completed.usage",
        ),
        (
            {"type": "model_completed", "message": {"role": "assistant"}, "stop_reason": "stop"},
            "model_completed.stop_reason",
        ),
        (
            {"type": "model_completed", "message": {"role": "assistant"}, "raw_stop_reason": 3},
            "model_completed.raw_stop_reason",
        ),
        (
            {"type": "model_completed", "message": {"role": "assistant", "reasoning": [{"signature": 5}]}},
            "model_completed.message.reasoning[0].signature",
        ),
        (
            {"type": "model_completed", "message": {"role": "assistant", "reasoning": "thought"}},
            "model_completed.message.reasoning",
        ),
        ({"type": "reasoning_delta", "text": None}, "reasoning_delta.text"),
    ],
)
def test_malformed_input_is_refused_with_the_place_named(data: Any, path: str) -> None:
    with pytest.raises(wire.WireFormatError) as refused:
        wire.decode_event(data)
    assert refused.value.path == path


def test_a_model_completed_without_a_stop_reason_gets_the_one_its_message_implies() -> None:
    calls = wire.decode_event({"type": "model_completed", "message": wire.encode_message(ANSWER)})
    plain = wire.decode_event({"type": "model_completed", "message": {"role": "assistant", "content": "hi"}})
    assert isinstance(calls, ev.ModelCompletedEvent) and isinstance(plain, ev.ModelCompletedEvent)
    assert (calls.stop_reason, calls.raw_stop_reason) == ("tool_use", None)
    assert (plain.stop_reason, plain.raw_stop_reason) == ("end_turn", None)


def test_reasoning_and_cache_counts_are_left_out_when_absent() -> None:
    assert "reasoning" not in wire.encode_message(ANSWER)
    assert wire.json_value(Usage(3, 4)) == {"input_tokens": 3, "output_tokens": 4}
    assert wire.encode_message(THOUGHTFUL)["reasoning"] == [
        {"text": "Let me réad it.", "signature": "EqQBCkYIARgCKkB="},
        {"text": "", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"text": "summary", "data": "gAAAAB...", "id": "rs_1"},
    ]
    assert wire.decode_message(wire.encode_message(THOUGHTFUL)) == THOUGHTFUL


def test_loads_refuses_text_that_is_not_json() -> None:
    with pytest.raises(wire.WireFormatError, match="not JSON"):
        wire.loads("{nope")


# numbering by the runtime ----------------------------------------------------


@tool
def shout(text: str) -> str:
    """Shout."""
    return text.upper()


class Emits:
    """An extension that streams its own (already numbered) event from a hook."""

    def __init__(self) -> None:
        from orchestrator import AgentExtension

        class Hook(AgentExtension):
            async def before_turn(self, context):  # type: ignore[no-untyped-def]
                await context.emit(ev.ExtensionEvent(name="mine", payload={}, seq=99, ts=1.0))
                await context.publish(ev.ExtensionEvent(name="published_only"))

        self.extension = Hook()


async def test_streamed_events_are_numbered_from_one_without_gaps_and_round_trip() -> None:
    model = ScriptedModel([asks(call("c1", "shout", text="hi"), text="let me"), AssistantMessage("all done now")])
    client = await create_agent(model, tools=[shout], extensions=[Emits().extension])
    seen: list[ev.AgentEvent] = []
    with trio.fail_after(10):
        async for event in client.stream("go", config=AgentRunConfig(session_id="s9", request_id="r9")):
            seen.append(event)
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert all(e.ts > 0 for e in seen)
    assert [e.ts for e in seen] == sorted(e.ts for e in seen)
    assert {(e.session_id, e.request_id) for e in seen} == {("s9", "r9")}
    names = [e.name for e in seen]
    assert "mine" in names and "published_only" not in names
    assert {"run_started", "text_delta", "tool_started", "tool_completed", "run_completed"} <= set(names)
    for event in seen:
        assert wire.loads(wire.dumps(event)) == event


async def test_each_request_counts_from_one() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("a")], repeat_last=True))
    firsts = []
    for _ in range(2):
        with trio.fail_after(10):
            firsts.append([e.seq async for e in client.stream("go")][:2])
    assert firsts == [[1, 2], [1, 2]]


@tool
async def chatty(context: AgentRunContext, n: int) -> str:
    """Emit many events."""
    for i in range(40):
        await context.emit(ev.ExtensionEvent(name="tick", payload={"n": n, "i": i}))
    return "ok"


async def test_parallel_calls_waiting_for_a_slow_consumer_keep_seq_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_module, "StreamQueue", functools.partial(sinks.StreamQueue, capacity=2))
    calls = [ToolCall(f"c{n}", "chatty", {"n": n}) for n in range(4)]
    client = await create_agent(ScriptedModel([AssistantMessage("", calls), AssistantMessage("done")]), tools=[chatty])
    seqs: list[int] = []
    with trio.fail_after(20):
        async with client.stream("go") as events:
            async for event in events:
                seqs.append(event.seq)
                if len(seqs) % 3 == 0:
                    await trio.sleep(0)
    assert len(seqs) > 160
    assert seqs == list(range(1, len(seqs) + 1))

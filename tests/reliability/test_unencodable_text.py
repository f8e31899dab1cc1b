"""Text that cannot be encoded as UTF-8 (lone surrogates) is cleaned where it enters the runtime.

Whatever a user, a tool, a hook or a model sends, every message in history, every event and
every stored row encodes as UTF-8: a lone surrogate becomes U+FFFD, a pair split across
streamed pieces is joined.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ScriptedModel,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.extensions.steering import SteeringExtension, SteeringMessageEvent
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent, TextDeltaEvent
from orchestrator.runtime.context import AgentRunContext
from orchestrator.text import clean_text, clean_value
from orchestrator.tools import ToolResult

LONE = "\udcff"  # what os.fsdecode makes of the byte 0xff in a file name
FFFD = "\ufffd"


def encodes(value: Any) -> bool:
    """Whether every string inside ``value`` (messages, events, tuples, dicts) encodes as UTF-8."""
    try:
        json.dumps(_strings(value), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _strings(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return [[_strings(k), _strings(v)] for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [_strings(v) for v in value]
    if hasattr(value, "__attrs_attrs__"):
        return [_strings(getattr(value, a.name)) for a in value.__attrs_attrs__]
    return None


async def stream_all(client: Any, user_input: Any, session: str = "s") -> list[AgentEvent]:
    with trio.fail_after(10):
        return [event async for event in client.stream(user_input, config=AgentRunConfig(session))]


def test_clean_text_and_clean_value() -> None:
    assert clean_text(f"a{LONE}b") == f"a{FFFD}b"
    assert clean_text("\ud83d\ude00") == "\U0001f600"
    nested = {"k" + LONE: [LONE, ("x", 1)], "ok": "fine"}
    assert clean_value(nested) == {"k" + FFFD: [FFFD, ("x", 1)], "ok": "fine"}
    same = {"a": ["b", ("c",)]}
    assert clean_value(same) is same


async def test_user_input_as_text_or_parts_is_cleaned_before_anything_sees_it() -> None:
    model = ScriptedModel([AssistantMessage("one"), AssistantMessage("two")])
    client = await create_agent(model)
    events = await stream_all(client, f"name{LONE}.txt")
    [started] = [e for e in events if e.name == "run_started"]
    assert started.payload["input"] == UserMessage(f"name{FFFD}.txt")
    events = await stream_all(client, [TextPart(f"part{LONE}")])
    assert all(encodes(e) for e in events)
    sent = model.requests[1].messages
    assert sent[0] == UserMessage(f"name{FFFD}.txt")
    assert sent[2] == UserMessage((TextPart(f"part{FFFD}"),))
    assert encodes(sent)


async def test_tool_results_plain_values_and_tool_result_contents_are_cleaned() -> None:
    @tool
    def listing() -> list[str]:
        """A directory listing with a name that is not UTF-8."""
        return ["a.txt", f"b{LONE}.txt"]

    @tool
    def raw() -> ToolResult:
        """A ToolResult whose content carries a lone surrogate."""
        return ToolResult(f"bad{LONE}", "failed")

    class Rewriter(AgentExtension):
        async def after_tool(self, context: Any, call: ToolCall, result: ToolResult, error: Any) -> None:
            if call.name == "raw":
                assert result.content == f"bad{FFFD}", "after_tool sees the cleaned result"
                result.content = result.content + "\udc80"

    model = ScriptedModel(
        [
            AssistantMessage("", [ToolCall("1", "listing", {}), ToolCall("2", "raw", {})]),
            AssistantMessage("done"),
        ]
    )
    client = await create_agent(model, tools=[listing, raw], extensions=[Rewriter()])
    events = await stream_all(client, "go")
    assert all(encodes(e) for e in events)
    results = {m.tool_call_id: m for m in model.requests[1].messages if isinstance(m, ToolMessage)}
    assert results["1"].content == f'["a.txt", "b{FFFD}.txt"]'
    assert results["2"].content == f"bad{FFFD}{FFFD}"
    [failed] = [e for e in events if e.name == "tool_failed"]
    assert failed.payload["result"] == results["2"]


class SplitStream:
    """A model that streams a surrogate pair split across two deltas, and answers with lone surrogates."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        if len(self.requests) == 1:
            yield TextDeltaEvent("smile \ud83d")
            yield TextDeltaEvent("\ude00 then")
            yield TextDeltaEvent(f" {LONE}")
            yield TextDeltaEvent("\ud83d")  # the stream ends inside a pair
            message = AssistantMessage(
                f"smile \ud83d\ude00 then {LONE}\ud83d", [ToolCall("c1", "echo", {"text": f"v{LONE}"})]
            )
            yield ResponseCompletedEvent(message)
        else:
            yield ResponseCompletedEvent(AssistantMessage("ok"))


async def test_streamed_deltas_join_split_pairs_and_final_messages_are_cleaned() -> None:
    seen: list[str] = []

    @tool
    def echo(text: str) -> str:
        """Echo."""
        seen.append(text)
        return "echoed"

    model = SplitStream()
    client = await create_agent(model, tools=[echo])
    events = await stream_all(client, "hi")
    deltas = [e.payload["text"] for e in events if e.name == "text_delta"]
    assert "".join(deltas) == f"smile \U0001f600 then {FFFD}{FFFD}"
    assert all(encodes(d) for d in deltas)
    [completed, _] = [e.payload["message"] for e in events if e.name == "model_completed"]
    assert completed.content == f"smile \U0001f600 then {FFFD}{FFFD}"
    assert completed.tool_calls[0].arguments == {"text": f"v{FFFD}"}
    assert seen == [f"v{FFFD}"]
    [started] = [e for e in events if e.name == "tool_started"]
    assert started.payload["call"] == completed.tool_calls[0]
    assert encodes(model.requests[1].messages)


async def test_steering_messages_are_cleaned() -> None:
    steering = SteeringExtension()
    client: Any = None

    @tool
    async def slow() -> str:
        """Lets steering arrive while it runs."""
        delivered = client.agent.emit_external_event(
            ExternalEvent("steering_message", {"content": f"stop{LONE}"}), config=AgentRunConfig("s")
        )
        assert delivered == [steering.name]
        return "done"

    @tool
    async def typed(context: AgentRunContext) -> str:
        """Publishes typed steering from inside the request."""
        await context.publish(SteeringMessageEvent(UserMessage((TextPart(f"typed{LONE}"),))))
        return "done"

    model = ScriptedModel(
        [
            AssistantMessage("", [ToolCall("1", "slow", {})]),
            AssistantMessage("", [ToolCall("2", "typed", {})]),
            AssistantMessage("ok"),
        ]
    )
    client = await create_agent(model, tools=[slow, typed], extensions=[steering])
    events = await stream_all(client, "go")
    assert all(encodes(e) for e in events)
    assert UserMessage(f"stop{FFFD}") in model.requests[1].messages
    assert UserMessage((TextPart(f"typed{FFFD}"),)) in model.requests[2].messages
    accepted = [e.payload["message"] for e in events if e.name == "steering_accepted"]
    assert accepted == [UserMessage(f"stop{FFFD}"), UserMessage((TextPart(f"typed{FFFD}"),))]


async def test_a_surrogate_bearing_tool_result_never_poisons_the_sqlite_store(tmp_path: Path) -> None:
    @tool
    def names() -> str:
        """A file name that is not UTF-8."""
        return f"report{LONE}.txt"

    store = SQLiteSessionStore(str(tmp_path / "sessions.db"))
    model = ScriptedModel(
        [AssistantMessage("", [ToolCall("1", "names", {})]), AssistantMessage("listed"), AssistantMessage("later")]
    )
    client = await create_agent(model, tools=[names], history=None, extensions=[store])
    with trio.fail_after(10):
        await client.run("list", config=AgentRunConfig("a"))
        await client.run("other session", config=AgentRunConfig("b"))

    reopened = SQLiteSessionStore(str(tmp_path / "sessions.db"))
    fresh = ScriptedModel([AssistantMessage("again"), AssistantMessage("again")])
    again = await create_agent(fresh, history=None, extensions=[reopened])
    with trio.fail_after(10):
        await again.run("more", config=AgentRunConfig("a"))
        await again.run("more", config=AgentRunConfig("b"))
    history_a = fresh.requests[0].messages
    assert ToolMessage("1", "names", f"report{FFFD}.txt") in history_a
    assert UserMessage("other session") in fresh.requests[1].messages


async def test_the_system_prompt_and_messages_extensions_add_are_cleaned() -> None:
    class Adds(AgentExtension):
        async def before_model(self, context: Any, request: Any) -> None:
            context.add_message(UserMessage(f"note{LONE}"))

    model = ScriptedModel([AssistantMessage("ok")])
    client = await create_agent(model, system_prompt=f"be{LONE}", extensions=[Adds()])
    with trio.fail_after(10):
        await client.run("hi")
    sent = model.requests[0].messages
    assert encodes(sent)
    assert sent[0].content == f"be{FFFD}" and UserMessage(f"note{FFFD}") in sent


def test_every_wire_line_encodes_whatever_an_extension_event_or_error_carries() -> None:
    from orchestrator import wire
    from orchestrator.events import ExtensionEvent, RunFailedEvent

    failed = RunFailedEvent(session_id="s", request_id="r", error=FileNotFoundError(f"no file b{LONE}.txt"))
    custom = ExtensionEvent(session_id="s", request_id="r", name="custom", payload={"path": f"b{LONE}"})
    for event in (failed, custom):
        line = wire.dumps(event)
        line.encode("utf-8")
        assert FFFD in line
    assert wire.encode_error(failed.error)["message"] == f"no file b{FFFD}.txt"


def test_session_and_request_ids_that_cannot_be_encoded_are_refused_where_they_are_made(tmp_path: Path) -> None:
    for fields in ({"session_id": "s\udc80"}, {"session_id": "s", "request_id": "r\ud83d"}):
        with pytest.raises(ValueError, match="must encode as UTF-8"):
            AgentRunConfig(**fields)
    assert AgentRunConfig("café ☕", request_id="r-ü").session_id == "café ☕"

    async def other_sessions_keep_saving() -> None:
        store = SQLiteSessionStore(tmp_path / "s.db")
        client = await create_agent(ScriptedModel([AssistantMessage("kept")]), history=None, extensions=[store])
        with trio.fail_after(10):
            await client.run("hi", config=AgentRunConfig("café"))
        assert store.messages("café") == [UserMessage("hi"), AssistantMessage("kept")]

    trio.run(other_sessions_keep_saving)

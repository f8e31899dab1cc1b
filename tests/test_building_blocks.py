"""The public building blocks for applications that serve runs on routes of their own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import trio

from orchestrator import AgentRunConfig, AssistantMessage, ExternalEvent, ScriptedModel, create_agent, wire
from orchestrator.delivery import Delivery
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.host import AgentHost
from orchestrator.runtime.handle import EventsExpired, UnknownRun
from orchestrator.wire.sse import encode_delivery, encode_pending, sse_closing_frame, sse_frame, sse_frames
from tests.support import asks, call


async def test_an_sse_frame_carries_seq_type_and_wire_json() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("hi")]))
    handle = await client.start("hello", config=AgentRunConfig("s"))
    events = [event async for event in handle.events()]
    frame = sse_frame(events[-1])
    assert frame == sse_frame(wire.encode_event(events[-1]))
    lines = frame.split("\n")
    assert lines[0] == f"id: {events[-1].seq}" and lines[1] == "event: run_completed"
    assert json.loads(lines[2].removeprefix("data: ")) == wire.encode_event(events[-1])
    assert frame.endswith("\n\n")
    closing = sse_closing_frame("the server is shutting down").split("\n")
    assert closing[0] == "event: closing" and not any(line.startswith("id:") for line in closing)
    assert json.loads(closing[1].removeprefix("data: ")) == {"type": "closing", "reason": "the server is shutting down"}


async def test_frames_hold_the_compact_json_of_every_event_non_ascii_kept() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("grüße, 世界 \u2028 \"quoted\" \\ done")]))
    handle = await client.start("héllo", config=AgentRunConfig("s"))
    encoded = [wire.encode_event(event) async for event in handle.events()]
    chunk = sse_frames(encoded).decode()
    datas = [line.removeprefix("data: ") for line in chunk.split("\n") if line.startswith("data: ")]
    assert datas == [json.dumps(data, ensure_ascii=False, separators=(",", ":")) for data in encoded]
    assert "世界" in chunk and chunk == "".join(sse_frame(data) for data in encoded)


async def test_a_pending_call_and_a_delivery_as_json() -> None:
    client = await create_agent(
        ScriptedModel([asks(call("q1", "ask_user", question="Which?", options=["a", "b"])), AssistantMessage("ok")]),
        extensions=[AskUserExtension()],
    )
    handle = await client.start("ask me", config=AgentRunConfig("s"))
    with trio.fail_after(10):
        while not client.pending("s"):
            await trio.sleep(0.01)
    pending = encode_pending(client.pending("s")[0])
    assert json.loads(json.dumps(pending)) == pending
    assert (pending["session_id"], pending["tool_call_id"], pending["event"]) == ("s", "q1", "ask_user")
    assert pending["response_event"] == "ask_user_response" and pending["payload"]["question"] == "Which?"
    refused = client.deliver(ExternalEvent("ask_user_response", {"tool_call_id": "nope"}), config=AgentRunConfig("s"))
    taken = client.deliver(
        ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "a"}), config=AgentRunConfig("s")
    )
    assert encode_delivery(taken) == {
        "event": "ask_user_response",
        "accepted": ["AskUserExtension"],
        "refused": {},
        "reason": "",
    }
    as_json = encode_delivery(refused)
    assert as_json["accepted"] == [] and as_json["reason"] and as_json["refused"] == dict(refused.refused)
    assert encode_delivery(Delivery("x")) == {
        "event": "x",
        "accepted": [],
        "refused": {},
        "reason": "no extension takes 'x' events",
    }
    assert (await handle.result()).content == "ok"


async def test_client_history_reads_the_in_memory_history_and_a_store_extension(tmp_path: Path) -> None:
    in_memory = await create_agent(ScriptedModel([AssistantMessage("one")]))
    await in_memory.run("first", config=AgentRunConfig("m"))
    assert [m.role for m in await in_memory.history("m")] == ["user", "assistant"]
    assert await in_memory.history("unknown") == []
    stored = await create_agent(
        ScriptedModel([AssistantMessage("two")]), history=None, extensions=[SQLiteSessionStore(tmp_path / "s.db")]
    )
    await stored.run("second", config=AgentRunConfig("d"))
    messages = await stored.history("d")
    assert [m.role for m in messages] == ["user", "assistant"] and messages[-1].content == "two"
    assert await stored.history("unknown") == []


def test_the_host_gives_history_and_follows_eagerly(tmp_path: Path) -> None:
    model = ScriptedModel([AssistantMessage("done")], repeat_last=True)
    store = SQLiteSessionStore(tmp_path / "h.db")
    with AgentHost(lambda: create_agent(model, history=None, extensions=[store])) as host:

        async def main() -> None:
            with pytest.raises(UnknownRun):
                await host.follow("no-such-run")
            run = await host.start("go", config=AgentRunConfig("h"), retain_events=2)
            assert (await run.result()).content == "done"
            with pytest.raises(EventsExpired):
                await run.follow(after=0)
            last = await host.call(_last_seq, host, run.request_id)
            assert [e async for e in await host.follow(run.request_id, after=last)] == []
            assert [wire.encode_event(e)["type"] async for e in await run.follow(after=last - 1)] == ["run_completed"]
            messages = await host.history("h")
            assert [m.role for m in messages] == ["user", "assistant"]

        asyncio.run(main())
        assert [m.role for m in host.sync.history("h")] == ["user", "assistant"]


async def _last_seq(host: AgentHost, request_id: str) -> int:
    return host.client.attach(request_id).last_seq

"""A hostile MCP server over stdio costs a bounded amount: message size, stderr, tool listing, bad descriptions.

The server (``tests/mcp_servers/hostile_server.py``, plain JSON-RPC) answers
with messages past the cap (its id first, last, or nowhere), floods stderr and
lists 200,000 tools. Each case ends in its documented outcome within a bound:
a failed result naming the cap, a bounded stderr, a cut listing read once.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -e '.[mcp]')")

from mcp_servers.harness import hostile_stdio
from support import asks, call

from orchestrator import AgentRunConfig, AssistantMessage, ScriptedModel, create_agent
from orchestrator.events import (
    AgentEvent,
    MCPServerFailedEvent,
    MCPServerStartedEvent,
    ToolCompletedEvent,
    ToolFailedEvent,
)
from orchestrator.extensions.mcp import HttpServer, MCPExtension, MCPServer, StdioServer
from orchestrator.extensions.mcp.servers import MAX_SCHEMA_BYTES, MAX_STDERR_BYTES, MAX_TOOLS
from orchestrator.messages import describe_parts

LIMIT = 60  # no test here may take longer: a hang fails instead of blocking the suite
NOT_FOREVER = 10.0  # a call answered past the cap fails within this (reading the whole line once is fast)
HELD_AT_MOST = 3.0  # no step of the event loop may take longer while a huge listing is read (not seconds on end)
MiB = 1 << 20


def hostile(*options: str, **fields: Any) -> StdioServer:
    command = hostile_stdio(*options)
    return StdioServer(name="hostile", command=command[0], args=command[1:], **fields)


async def run(client: Any, text: str, session: str = "s") -> list[AgentEvent]:
    events: list[AgentEvent] = []
    async for event in client.stream(text, config=AgentRunConfig(session)):
        events.append(event)
    assert events[-1].name == "run_completed", events[-1]
    return events


def results(events: list[AgentEvent]) -> dict[str, tuple[str, str]]:
    return {
        e.call.id: (e.result.status.value, describe_parts(e.result.content))
        for e in events
        if isinstance(e, ToolCompletedEvent | ToolFailedEvent)
    }


def finished_at(events: list[tuple[float, AgentEvent]], call_id: str) -> float:
    [at] = [t for t, e in events if isinstance(e, ToolCompletedEvent | ToolFailedEvent) and e.call.id == call_id]
    return at


# --- a message past max_message_bytes -------------------------------------------------------------


@pytest.mark.parametrize("id_at", ["first", "last"])
async def test_an_answer_past_the_cap_fails_its_call_fast_naming_the_cap_and_the_server_stays_ready(id_at: str) -> None:
    server = hostile(max_message_bytes=1 * MiB)
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [
                    asks(call("huge", "hostile__huge", size=24 * MiB, id_at=id_at)),
                    asks(call("after", "hostile__echo", text="still here")),
                    AssistantMessage("done"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            timed: list[tuple[float, AgentEvent]] = []
            async for event in client.stream("go", config=AgentRunConfig("s")):
                timed.append((time.monotonic(), event))
                if event.name == "tool_started" and event.payload["call"].id == "huge":
                    started = time.monotonic()
            assert mcp.state("hostile") == "ready"

    events = [event for _, event in timed]
    assert events[-1].name == "run_completed"
    assert finished_at(timed, "huge") - started < NOT_FOREVER
    status, text = results(events)["huge"]
    assert status == "failed"
    assert "more than 1048576 bytes" in text and "max_message_bytes" in text
    assert results(events)["after"] == ("succeeded", "still here")  # the rest of the line was read and dropped
    assert [e for e in events if isinstance(e, MCPServerFailedEvent)] == []


async def test_an_answer_past_the_cap_that_names_no_request_ends_the_connection_saying_why() -> None:
    server = hostile(max_message_bytes=1 * MiB)
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [
                    asks(call("huge", "hostile__huge", size=8 * MiB, id_at="none")),
                    asks(call("after", "hostile__echo", text="restarted")),
                    AssistantMessage("done"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            events = await run(client, "go")
            assert mcp.state("hostile") == "ready"

    status, text = results(events)["huge"]
    assert status == "failed" and "more than its max_message_bytes (1048576)" in text
    [failed] = [e for e in events if isinstance(e, MCPServerFailedEvent)]
    assert failed.stage == "call" and "max_message_bytes (1048576)" in failed.error
    assert [e.restarts for e in events if isinstance(e, MCPServerStartedEvent)] == [0, 1]
    assert results(events)["after"] == ("succeeded", "restarted")


async def test_a_notification_past_the_cap_is_dropped_with_a_warning_and_the_call_is_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = hostile(max_message_bytes=1 * MiB)
    caplog.set_level(logging.WARNING, logger="orchestrator.mcp")
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [asks(call("noisy", "hostile__huge", size=8 * MiB, id_at="notification")), AssistantMessage("done")]
            )
            client = await create_agent(model, extensions=[mcp])
            events = await run(client, "go")
            assert mcp.state("hostile") == "ready"

    assert results(events)["noisy"] == ("succeeded", "after the notification")
    assert [e for e in events if isinstance(e, MCPServerFailedEvent)] == []
    [warning] = [r.getMessage() for r in caplog.records if r.name == "orchestrator.mcp"]
    assert "more than max_message_bytes (1048576), dropped" in warning


async def test_an_answer_under_the_cap_arrives_whole_across_many_reads() -> None:
    server = hostile(max_message_bytes=8 * MiB)
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [asks(call("big", "hostile__huge", size=6 * MiB, id_at="last")), AssistantMessage("done")]
            )
            client = await create_agent(model, extensions=[mcp])
            events = await run(client, "go")

    status, text = results(events)["big"]
    assert status == "succeeded"
    assert text.startswith("x" * 100_000) and "the result has 6291456 characters of text" in text


# --- stderr ---------------------------------------------------------------------------------------


async def test_stderr_keeps_only_its_last_bytes_saying_how_many_were_dropped() -> None:
    flood = 8 * MiB
    server = hostile("--stderr", str(flood), max_stderr_bytes=64 * 1024)
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [asks(call("spam", "hostile__spam", size=flood)), AssistantMessage("done")]
            )
            client = await create_agent(model, extensions=[mcp])
            events = await run(client, "go")
            kept = mcp.stderr("hostile")

    assert results(events)["spam"] == ("succeeded", "spammed")
    note, _, tail = kept.partition("\n")
    written = 2 * (flood + len("hostile: spam ends\n"))
    assert note == f"[{written - 64 * 1024} earlier bytes dropped]"
    assert len(tail.encode()) == 64 * 1024
    assert tail.endswith("hostile: spam ends\n")


# --- the tool listing -----------------------------------------------------------------------------


async def test_a_listing_of_200000_tools_is_cut_to_the_cap_with_one_warning_and_read_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = tmp_path / "ledger"
    server = hostile("--tools", "200000", "--fat-schema", str(MAX_SCHEMA_BYTES + 1), "--ledger", str(ledger))
    caplog.set_level(logging.WARNING, logger="orchestrator.mcp")
    longest = 0.0

    async def heartbeat() -> None:
        nonlocal longest
        while True:
            before = time.monotonic()
            await trio.sleep(0.01)
            longest = max(longest, time.monotonic() - before)

    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp, trio.open_nursery() as beating:
            beating.start_soon(heartbeat)
            model = ScriptedModel([AssistantMessage("ok")], repeat_last=True)
            client = await create_agent(model, extensions=[mcp])
            first = await run(client, "one", "s1")
            second = await run(client, "two", "s2")
            beating.cancel_scope.cancel()

    assert longest < HELD_AT_MOST

    offered = [tool.name for tool in model.requests[0].tools]
    # the first MAX_TOOLS listed: echo, huge, spam, fat (left out: its schema is too large), t0, t1, ...
    assert offered == ["hostile__echo", "hostile__huge", "hostile__spam"] + [
        f"hostile__t{index}" for index in range(MAX_TOOLS - 4)
    ]
    assert [tool.name for tool in model.requests[1].tools] == offered
    [started] = [e for e in first if isinstance(e, MCPServerStartedEvent)]
    assert len(started.tools) == MAX_TOOLS - 1
    assert [e for e in second if isinstance(e, MCPServerStartedEvent)] == []
    assert ledger.read_text().splitlines().count("tools/list") == 1
    [warning] = [r.getMessage() for r in caplog.records if r.name == "orchestrator.mcp"]
    assert f"more than {MAX_TOOLS} tools (max_tools)" in warning
    assert f"more than {MAX_SCHEMA_BYTES} bytes (max_schema_bytes)" in warning and "'fat'" in warning


async def test_a_short_listing_is_cut_to_a_small_max_tools_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="orchestrator.mcp")
    with trio.fail_after(LIMIT):
        async with MCPExtension([hostile(max_tools=2)]) as mcp:
            model = ScriptedModel([AssistantMessage("ok")])
            client = await create_agent(model, extensions=[mcp])
            await run(client, "one")

    assert [tool.name for tool in model.requests[0].tools] == ["hostile__echo", "hostile__huge"]
    [warning] = [r.getMessage() for r in caplog.records if r.name == "orchestrator.mcp"]
    assert "more than 2 tools (max_tools)" in warning


# --- constructor checks ---------------------------------------------------------------------------

STDIO: dict[str, Any] = {"name": "s", "command": "server"}
HTTP: dict[str, Any] = {"name": "h", "url": "https://example.test/mcp"}


@pytest.mark.parametrize(
    ("kind", "fields", "error", "field"),
    [
        (StdioServer, {"command": ["node", "server.js"]}, TypeError, "command"),
        (StdioServer, {"command": None}, TypeError, "command"),
        (StdioServer, {"command": ""}, ValueError, "command"),
        (StdioServer, {"command": "a\0b"}, ValueError, "command"),
        (StdioServer, {"args": "--flag"}, TypeError, "args"),
        (StdioServer, {"args": 3}, TypeError, "args"),
        (StdioServer, {"args": ["ok", 3]}, TypeError, "args"),
        (StdioServer, {"env": ["A=1"]}, TypeError, "env"),
        (StdioServer, {"env": {"A": 1}}, TypeError, "env"),
        (StdioServer, {"env": {"A=B": "1"}}, ValueError, "env"),
        (StdioServer, {"cwd": 3}, TypeError, "cwd"),
        (StdioServer, {"cwd": ""}, ValueError, "cwd"),
        (StdioServer, {"max_message_bytes": "16M"}, TypeError, "max_message_bytes"),
        (StdioServer, {"max_message_bytes": 0}, ValueError, "max_message_bytes"),
        (StdioServer, {"max_stderr_bytes": 1.5}, TypeError, "max_stderr_bytes"),
        (StdioServer, {"max_stderr_bytes": -1}, ValueError, "max_stderr_bytes"),
        (StdioServer, {"name": 7}, TypeError, "name"),
        (StdioServer, {"name": "has space"}, ValueError, "name"),
        (StdioServer, {"prefix": 1}, TypeError, "prefix"),
        (StdioServer, {"prefix": "a.b/"}, ValueError, "prefix"),
        (StdioServer, {"connect_timeout": "30"}, TypeError, "connect_timeout"),
        (StdioServer, {"call_timeout": 0}, ValueError, "call_timeout"),
        (StdioServer, {"max_tools": True}, TypeError, "max_tools"),
        (StdioServer, {"max_tools": 0}, ValueError, "max_tools"),
        (StdioServer, {"max_schema_bytes": 2.0}, TypeError, "max_schema_bytes"),
        (HttpServer, {"url": b"https://example.test"}, TypeError, "url"),
        (HttpServer, {"url": "ftp://example.test"}, ValueError, "URL"),
        (HttpServer, {"headers": [("A", "b")]}, TypeError, "headers"),
        (HttpServer, {"headers": {"A": "b\r\nInjected: 1"}}, ValueError, "headers"),
        (HttpServer, {"max_tools": -3}, ValueError, "max_tools"),
        (MCPServer, {"name": None}, TypeError, "name"),
    ],
)
def test_every_mcp_server_value_checks_its_fields_when_made(
    kind: type[MCPServer], fields: dict[str, Any], error: type[Exception], field: str
) -> None:
    base = {StdioServer: STDIO, HttpServer: HTTP, MCPServer: {"name": "m"}}[kind]
    with pytest.raises(error, match=field):
        kind(**{**base, **fields})


def test_the_defaults_are_the_documented_caps() -> None:
    stdio = StdioServer(name="s", command="server", args=("a",), cwd=Path("/tmp"))
    assert (stdio.max_message_bytes, stdio.max_stderr_bytes) == (16 * MiB, MAX_STDERR_BYTES) == (16 * MiB, 64 * 1024)
    assert (stdio.max_tools, stdio.max_schema_bytes) == (MAX_TOOLS, MAX_SCHEMA_BYTES) == (256, 64 * 1024)
    assert stdio.cwd == "/tmp" and stdio.args == ("a",)

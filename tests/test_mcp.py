"""MCPExtension against real MCP servers, started by the tests, under trio.

The reference servers from npm (server-everything for the protocol's
features, server-filesystem for real tools) run over stdio; a server built
with the SDK runs over streamable HTTP on 127.0.0.1 (and over stdio where a
test needs it to crash on demand). A server that is not installed here makes
its tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sniffio
import trio

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -e '.[mcp]')")

from mcp import Client, StdioServerParameters
from mcp_servers.harness import HERE, TOKEN, children_running, npm_server, sdk_http, sdk_stdio
from support import asks, call

from machines.mcp_connection import MCP_CONNECTION
from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolCall,
    ToolMessage,
    create_agent,
    tool,
)
from orchestrator.errors import AgentError
from orchestrator.events import (
    AgentEvent,
    MCPServerFailedEvent,
    MCPServerStartedEvent,
    ToolCompletedEvent,
    ToolFailedEvent,
    TransitionEvent,
)
from orchestrator.extensions.mcp import HttpServer, MCPExtension, MCPNotOpen, StdioServer
from orchestrator.messages import ImagePart, describe_parts, images_of

LIMIT = 60  # no test here may take longer: a hang fails instead of blocking the suite


def everything(**options: Any) -> StdioServer:
    command = npm_server("server-everything")
    return StdioServer(name="everything", command=command[0], args=[*command[1:], "stdio"], **options)


def sdk(**options: Any) -> StdioServer:
    command = sdk_stdio()
    return StdioServer(name="sdk", command=command[0], args=command[1:], **options)


async def run(client: Any, text: str, session: str = "s") -> list[AgentEvent]:
    events: list[AgentEvent] = []
    async for event in client.stream(text, config=AgentRunConfig(session)):
        events.append(event)
    assert events[-1].name == "run_completed", events[-1]
    return events


def results(events: list[AgentEvent]) -> dict[str, tuple[str, str]]:
    """Tool results by call id: (status, content as text, images described)."""
    return {
        e.call.id: (e.result.status.value, describe_parts(e.result.content))
        for e in events
        if isinstance(e, ToolCompletedEvent | ToolFailedEvent)
    }


def images(events: list[AgentEvent], call_id: str) -> tuple[ImagePart, ...]:
    [found] = [e.result for e in events if isinstance(e, ToolCompletedEvent) and e.call.id == call_id]
    return images_of(found.content)


def calls_then_answers(tool_call: ToolCall) -> Any:
    """A script step for any number of sessions: the call first, then an answer once its result is in."""

    def step(request: ModelRequest) -> AssistantMessage:
        if isinstance(request.messages[-1], ToolMessage):
            return AssistantMessage("ok")
        return asks(tool_call)

    return step


def of_kind(events: list[AgentEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def connection_steps(events: list[AgentEvent]) -> list[tuple[str, str, str]]:
    return [
        (e.source, e.trigger, e.dest)
        for e in events
        if isinstance(e, TransitionEvent) and e.machine == "mcp_connection"
    ]


# A skip inside a trio test loses its reason: what a test needs is checked by these plain fixtures.


@pytest.fixture
def needs_everything() -> None:
    npm_server("server-everything")


@pytest.fixture
def needs_filesystem() -> None:
    npm_server("server-filesystem")


@pytest.fixture
def needs_proc() -> None:
    children_running("")


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """One SDK-built server over streamable HTTP, shared by the tests of this module that only call it."""
    with sdk_http() as (url, _):
        yield url


# --- the SDK under trio, server-everything over stdio ---------------------------------------


async def test_server_everything_over_stdio_under_trio_offers_its_tools_as_listed_and_maps_results(
    needs_everything: None,
) -> None:
    assert sniffio.current_async_library() == "trio"
    server = everything()
    with trio.fail_after(LIMIT):
        # What the server lists, read with the SDK alone (also under trio).
        async with Client(StdioServerParameters(command=server.command, args=list(server.args))) as raw:
            listed = {tool.name: tool for tool in (await raw.list_tools()).tools}
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [
                    asks(
                        call("echo", "everything__echo", message="hello MCP"),
                        call("sum", "everything__get-sum", a=2, b=40),
                        call("image", "everything__get-tiny-image"),
                        call("weather", "everything__get-structured-content", location="Chicago"),
                        call("bad", "everything__get-sum", a="two", b=1),
                    ),
                    AssistantMessage("done"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            events = await run(client, "use the tools")
            assert mcp.state("everything") == "ready"

    offered = {tool.name: tool for tool in model.requests[0].tools}
    assert set(offered) == {f"everything__{name}" for name in listed}
    for name, listed_tool in listed.items():
        assert offered[f"everything__{name}"].parameters == listed_tool.input_schema  # the schema as given
        assert offered[f"everything__{name}"].description == listed_tool.description

    [started] = of_kind(events, MCPServerStartedEvent)
    assert started.server == "everything" and started.restarts == 0
    assert set(started.tools) == set(offered)
    assert "everything" in started.server_info.lower() or started.server_info
    assert connection_steps(events) == [("idle", "start", "connecting"), ("connecting", "establish", "ready")]

    done = results(events)
    assert done["echo"] == ("succeeded", "Echo: hello MCP")
    assert done["sum"][0] == "succeeded" and "42" in done["sum"][1]
    status, text = done["image"]
    assert status == "succeeded" and "[image: image/png, " in text and " bytes]" in text
    [tiny] = images(events, "image")  # the model reads the image itself
    assert tiny.media_type == "image/png" and tiny.data is not None and tiny.data.startswith(b"\x89PNG\r\n\x1a\n")
    status, text = done["weather"]
    weather = json.loads(text)
    assert status == "succeeded" and {"temperature", "conditions", "humidity"} <= set(weather)
    assert done["bad"][0] == "failed"  # the server's error answer (invalid arguments) is a failed result
    assert mcp.state("everything") == "closed"


async def test_a_call_that_times_out_fails_and_the_server_is_restarted_by_the_next_request(
    needs_everything: None,
) -> None:
    with trio.fail_after(LIMIT):
        async with MCPExtension([everything(call_timeout=1.0)]) as mcp:
            model = ScriptedModel(
                [
                    asks(call("slow", "everything__trigger-long-running-operation", duration=30, steps=3)),
                    AssistantMessage("gave up"),
                    asks(call("echo", "everything__echo", message="again")),
                    AssistantMessage("done"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            first = await run(client, "slow")
            assert mcp.state("everything") == "failed"
            second = await run(client, "again")
            assert mcp.state("everything") == "ready"

    status, text = results(first)["slow"]
    assert status == "failed" and "did not answer a call of trigger-long-running-operation within 1 s" in text
    [failed] = of_kind(first, MCPServerFailedEvent)
    assert (failed.server, failed.stage) == ("everything", "call")
    assert connection_steps(first)[-1] == ("ready", "fail", "failed")

    assert connection_steps(second) == [("failed", "restart", "connecting"), ("connecting", "establish", "ready")]
    [restarted] = of_kind(second, MCPServerStartedEvent)
    assert restarted.restarts == 1
    assert results(second)["echo"] == ("succeeded", "Echo: again")


async def test_a_server_killed_between_requests_is_reported_and_restarted_by_the_next_request(
    needs_everything: None, needs_proc: None
) -> None:
    server = everything()
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [
                    asks(call("a", "everything__echo", message="one")),
                    AssistantMessage("ok"),
                    asks(call("b", "everything__echo", message="two")),
                    AssistantMessage("ok"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            await run(client, "first")
            [pid] = children_running(server.args[0])
            os.kill(pid, signal.SIGKILL)
            while mcp.state("everything") != "failed":  # noticed while no request runs
                await trio.sleep(0.05)
            events = await run(client, "second")
            assert children_running(server.args[0]) != [pid]

    [failed] = of_kind(events, MCPServerFailedEvent)
    assert failed.stage == "idle" and "closed its connection" in failed.error
    assert connection_steps(events) == [
        ("ready", "fail", "failed"),  # taken while no request ran: streamed by the next one
        ("failed", "restart", "connecting"),
        ("connecting", "establish", "ready"),
    ]
    assert results(events)["b"] == ("succeeded", "Echo: two")


async def test_servers_stop_when_the_block_exits_and_a_closed_or_unopened_extension_is_refused(
    needs_everything: None, needs_proc: None
) -> None:
    server = everything()
    unopened = MCPExtension([server])
    client = await create_agent(ScriptedModel([AssistantMessage("never")]), extensions=[unopened])
    with pytest.raises(MCPNotOpen, match="not open"):
        await client.run("hi")

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as application:
            # The application's nursery is cancelled while the extension is open: it closes cleanly.
            opened = trio.Event()

            async def serve() -> None:
                async with MCPExtension([server]) as mcp:
                    model = ScriptedModel([asks(call("a", "everything__echo", message="x")), AssistantMessage("ok")])
                    agent_client = await create_agent(model, extensions=[mcp])
                    await run(agent_client, "go")
                    holder.append(mcp)
                    opened.set()
                    await trio.sleep_forever()

            holder: list[MCPExtension] = []
            application.start_soon(serve)
            await opened.wait()
            assert len(children_running(server.args[0])) == 1
            application.cancel_scope.cancel()
    [mcp] = holder
    assert mcp.state("everything") == "closed"
    assert children_running(server.args[0]) == []
    assert [step.trigger for step in mcp.connections["everything"].machine.history] == ["start", "establish", "close"]
    again = await create_agent(ScriptedModel([AssistantMessage("never")]), extensions=[mcp])
    with pytest.raises(MCPNotOpen, match="closed"):
        await again.run("hi")


async def test_concurrent_first_requests_start_the_server_once(needs_everything: None) -> None:
    with trio.fail_after(LIMIT):
        async with MCPExtension([everything()]) as mcp:
            model = ScriptedModel([calls_then_answers(call("a", "everything__echo", message="hi"))], repeat_last=True)
            client = await create_agent(model, extensions=[mcp])
            streams: dict[str, list[AgentEvent]] = {}

            async def one(session: str) -> None:
                streams[session] = await run(client, "go", session)

            async with trio.open_nursery() as nursery:
                for session in ("s1", "s2", "s3"):
                    nursery.start_soon(one, session)

    every = [event for events in streams.values() for event in events]
    assert len(of_kind(every, MCPServerStartedEvent)) == 1
    assert [step.trigger for step in mcp.connections["everything"].machine.history] == ["start", "establish", "close"]
    assert all(results(events)["a"] == ("succeeded", "Echo: hi") for events in streams.values())


async def test_requests_waiting_for_a_start_that_fails_do_not_start_it_again(needs_everything: None) -> None:
    node = npm_server("server-everything")[0]
    silent = StdioServer(name="silent", command=node, args=["-e", "setInterval(() => {}, 1000)"], connect_timeout=1)
    with trio.fail_after(LIMIT):
        async with MCPExtension([silent]) as mcp:
            client = await create_agent(
                ScriptedModel([AssistantMessage("without it")], repeat_last=True), extensions=[mcp]
            )
            streams: dict[str, list[AgentEvent]] = {}

            async def one(session: str) -> None:
                streams[session] = await run(client, "go", session)

            async with trio.open_nursery() as nursery:
                for session in ("s1", "s2", "s3"):
                    nursery.start_soon(one, session)

    every = [event for events in streams.values() for event in events]
    assert len(of_kind(every, MCPServerFailedEvent)) == 1  # one start, one failure, reported once
    assert [step.trigger for step in mcp.connections["silent"].machine.history] == ["start", "fail", "close"]


async def test_a_server_tool_named_like_another_tool_fails_the_request_naming_it(needs_everything: None) -> None:
    @tool(name="everything__echo")
    def local_echo(message: str) -> str:
        """A local tool that has the name the server's echo is offered under."""
        return message

    with trio.fail_after(LIMIT):
        async with MCPExtension([everything()]) as mcp:
            client = await create_agent(
                ScriptedModel([AssistantMessage("never")]), tools=[local_echo], extensions=[mcp]
            )
            with pytest.raises(ValueError, match="'everything__echo' is registered twice"):
                await client.run("go")


async def test_a_request_cancelled_while_its_server_starts_leaves_it_to_the_next_request(
    needs_everything: None, needs_proc: None
) -> None:
    command = npm_server("server-everything")
    # server-everything, started after a second's pause (marked so its process can be found)
    slow = StdioServer(
        name="slow", command="/bin/sh", args=["-c", f'sleep 1; exec "{command[0]}" "{command[1]}" stdio slow-marker']
    )
    with trio.fail_after(LIMIT):
        async with MCPExtension([slow]) as mcp:
            model = ScriptedModel([calls_then_answers(call("a", "slow__get-sum", a=1, b=1))], repeat_last=True)
            client = await create_agent(model, extensions=[mcp])
            with trio.move_on_after(5) as waited:
                async for event in client.stream("go", config=AgentRunConfig("cancelled")):
                    if isinstance(event, TransitionEvent) and event.machine == "mcp_connection":
                        waited.cancel()  # the start is under way
            assert waited.cancelled_caught
            assert mcp.state("slow") == "failed"
            assert children_running("slow-marker") == []
            events = await run(client, "again", "next")

    assert connection_steps(events) == [("failed", "restart", "connecting"), ("connecting", "establish", "ready")]
    assert results(events)["a"] == ("succeeded", "The sum of 1 and 1 is 2.")


async def test_a_call_under_way_when_the_block_exits_gets_a_failed_result_at_once(needs_everything: None) -> None:
    events: list[AgentEvent] = []
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            async with MCPExtension([everything(call_timeout=50)]) as mcp:
                model = ScriptedModel(
                    [
                        asks(call("slow", "everything__trigger-long-running-operation", duration=40, steps=40)),
                        AssistantMessage("stopped"),
                    ]
                )
                client = await create_agent(model, extensions=[mcp])
                calling = trio.Event()

                async def request() -> None:
                    async for event in client.stream("slow", config=AgentRunConfig("s")):
                        events.append(event)
                        if event.name == "tool_started":
                            calling.set()

                nursery.start_soon(request)
                await calling.wait()
            assert mcp.state("everything") == "closed"

    status, text = results(events)["slow"]
    assert status == "failed" and "its MCPExtension was closed" in text
    assert events[-1].name == "run_completed"


# --- server-filesystem over stdio: real tools ----------------------------------------------------


async def test_server_filesystem_reads_and_writes_inside_its_root_and_refuses_outside(
    tmp_path: Path, needs_filesystem: None
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("first line\nsecond line\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("do not read")
    command = npm_server("server-filesystem")
    server = StdioServer(name="fs", prefix="fs_", command=command[0], args=[*command[1:], str(root)])
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [
                    asks(
                        call("read", "fs_read_text_file", path=str(root / "notes.txt")),
                        call("write", "fs_write_file", path=str(root / "made.txt"), content="written by the agent"),
                        call("outside", "fs_read_text_file", path=str(outside)),
                    ),
                    asks(call("list", "fs_list_directory", path=str(root))),
                    AssistantMessage("done"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            events = await run(client, "files")

    assert all(name.startswith("fs_") for name in of_kind(events, MCPServerStartedEvent)[0].tools)
    done = results(events)
    assert done["read"] == ("succeeded", "first line\nsecond line\n")
    assert done["write"][0] == "succeeded"
    assert (root / "made.txt").read_text() == "written by the agent"
    status, text = done["outside"]
    assert status == "failed" and "do not read" not in text
    status, text = done["list"]
    assert status == "succeeded" and "notes.txt" in text and "made.txt" in text


# --- the SDK-built server: streamable HTTP with headers, crashes over stdio -----------------------


async def test_sdk_server_over_streamable_http_with_headers(http_url: str) -> None:
    good = HttpServer(name="web", prefix="w_", url=http_url, headers={"Authorization": f"Bearer {TOKEN}"})
    bad = HttpServer(name="nokey", url=http_url, connect_timeout=10)
    with trio.fail_after(LIMIT):
        async with MCPExtension([good, bad]) as mcp:
            model = ScriptedModel(
                [
                    asks(
                        call("add", "w_add", a=2, b=3),
                        call("weather", "w_weather", city="Oslo"),
                        call("pixel", "w_pixel"),
                        call("refuse", "w_refuse", reason="not today"),
                        call("missing", "nokey__add", a=1, b=1),
                    ),
                    AssistantMessage("done"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            events = await run(client, "web")
            assert (mcp.state("web"), mcp.state("nokey")) == ("ready", "failed")

    [started] = of_kind(events, MCPServerStartedEvent)
    assert started.server == "web" and set(started.tools) >= {  # another test may have taught it more
        "w_add",
        "w_weather",
        "w_pixel",
        "w_refuse",
        "w_sleep",
        "w_crash",
        "w_learn",
    }
    [failed] = of_kind(events, MCPServerFailedEvent)
    assert (failed.server, failed.stage) == ("nokey", "connect")
    assert "could not start" in failed.error
    done = results(events)
    assert done["add"] == ("succeeded", "2 + 3 = 5")
    status, text = done["weather"]
    assert status == "succeeded" and json.loads(text) == {"city": "Oslo", "celsius": 21.5}
    status, text = done["pixel"]
    assert status == "succeeded" and "[image: image/png, " in text
    [pixel] = images(events, "pixel")
    assert pixel.data is not None and pixel.data.startswith(b"\x89PNG")
    status, text = done["refuse"]
    assert status == "failed" and text.endswith("refused: not today")
    status, text = done["missing"]
    assert status == "failed" and "not available" in text


async def test_an_http_server_that_dies_gives_failed_results_and_is_reconnected_once_it_is_back() -> None:
    with sdk_http() as (url, process):
        server = HttpServer(
            name="web", url=url, headers={"Authorization": f"Bearer {TOKEN}"}, call_timeout=20, connect_timeout=10
        )
        port = int(url.split(":")[2].split("/")[0])
        with trio.fail_after(LIMIT):
            async with MCPExtension([server]) as mcp:
                model = ScriptedModel(
                    [
                        asks(call("crash", "web__crash")),
                        asks(call("after", "web__add", a=1, b=1)),
                        AssistantMessage("down"),
                        asks(call("back", "web__add", a=20, b=22)),
                        AssistantMessage("up"),
                    ]
                )
                client = await create_agent(model, extensions=[mcp])
                down = await run(client, "crash it")
                assert process.wait(10) == 3
                with sdk_http(port) as _:
                    up = await run(client, "again")

    done = results(down)
    assert done["crash"][0] == "failed"
    assert done["after"][0] == "failed"  # its restart finds nobody listening
    assert [e.stage for e in of_kind(down, MCPServerFailedEvent)] == ["call", "connect"]
    assert results(up)["back"] == ("succeeded", "20 + 22 = 42")
    assert connection_steps(up) == [("failed", "restart", "connecting"), ("connecting", "establish", "ready")]


async def test_a_server_killed_during_a_call_fails_it_quoting_its_stderr_and_restarts_on_the_next_call(
    needs_everything: None, needs_proc: None
) -> None:
    server = everything(call_timeout=30)
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [
                    asks(call("slow", "everything__trigger-long-running-operation", duration=20, steps=20)),
                    asks(call("add", "everything__get-sum", a=1, b=2)),
                    AssistantMessage("done"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            events: list[AgentEvent] = []
            async for event in client.stream("crash", config=AgentRunConfig("s")):
                events.append(event)
                if event.name == "tool_started" and event.payload["call"].id == "slow":
                    [pid] = children_running(server.args[0])
                    os.kill(pid, signal.SIGKILL)  # the server dies with the call unanswered

    done = results(events)
    status, text = done["slow"]
    assert status == "failed" and "closed its connection" in text
    assert "Starting default (STDIO) server" in text  # the end of its stderr
    assert done["add"] == ("succeeded", "The sum of 1 and 2 is 3.")
    [failed] = of_kind(events, MCPServerFailedEvent)
    assert failed.stage == "call" and "Starting default (STDIO) server" in failed.error
    assert [e.restarts for e in of_kind(events, MCPServerStartedEvent)] == [0, 1]
    assert connection_steps(events) == [
        ("idle", "start", "connecting"),
        ("connecting", "establish", "ready"),
        ("ready", "fail", "failed"),
        ("failed", "restart", "connecting"),
        ("connecting", "establish", "ready"),
    ]


async def test_when_a_server_says_its_tools_changed_the_next_request_offers_the_new_list(http_url: str) -> None:
    word = "hello_changed"
    server = HttpServer(name="web", url=http_url, headers={"Authorization": f"Bearer {TOKEN}"})
    with trio.fail_after(LIMIT):
        async with MCPExtension([server]) as mcp:
            model = ScriptedModel(
                [
                    asks(call("learn", "web__learn", word=word)),
                    AssistantMessage("learned"),
                    asks(call("said", f"web__{word}")),
                    AssistantMessage("done"),
                ]
            )
            client = await create_agent(model, extensions=[mcp])
            first = await run(client, "learn")
            # over HTTP the notification comes on its own stream, possibly after the call's answer
            while not mcp.connections["web"].tools_changed:
                await trio.sleep(0.02)
            second = await run(client, "use it")

    assert results(first)["learn"] == ("succeeded", f"learned {word}")
    assert f"web__{word}" not in {tool.name for tool in model.requests[0].tools}
    assert f"web__{word}" in {tool.name for tool in model.requests[2].tools}
    assert results(second)["said"] == ("succeeded", word)
    assert of_kind(second, MCPServerStartedEvent) == []  # the same session, its list read again


# --- servers that never start ------------------------------------------------------------------


async def test_servers_that_cannot_start_fail_with_the_reason_and_the_request_goes_on(
    tmp_path: Path, needs_everything: None
) -> None:
    node = npm_server("server-everything")[0]
    missing = StdioServer(name="missing", command=str(tmp_path / "no-such-program"))
    exits = StdioServer(name="exits", command=node, args=["-e", "console.error('no config given'); process.exit(2)"])
    silent = StdioServer(name="silent", command=node, args=["-e", "setInterval(() => {}, 1000)"], connect_timeout=1)
    with trio.fail_after(LIMIT):
        async with MCPExtension([missing, exits, silent]) as mcp:
            model = ScriptedModel([asks(call("a", "exits__anything")), AssistantMessage("without them")])
            client = await create_agent(model, extensions=[mcp])
            events = await run(client, "go")
            assert {name: mcp.state(name) for name in ("missing", "exits", "silent")} == dict.fromkeys(
                ("missing", "exits", "silent"), "failed"
            )

    failures = {e.server: e for e in of_kind(events, MCPServerFailedEvent)}
    assert {e.stage for e in failures.values()} == {"connect"}
    assert "no-such-program" in failures["missing"].error
    assert "no config given" in failures["exits"].error
    assert "did not start within 1 s" in failures["silent"].error
    assert results(events)["a"][0] == "failed"
    assert of_kind(events, MCPServerStartedEvent) == []


async def test_every_edge_of_the_connection_machine_is_taken_by_real_servers(
    tmp_path: Path, needs_everything: None, needs_proc: None
) -> None:
    command = npm_server("server-everything")
    flag = tmp_path / "may-start"
    flag.touch()
    # Starts the real server while the flag file exists, exits at once otherwise.
    gated = StdioServer(
        name="gated",
        command="/bin/sh",
        args=["-c", f'test -e "{flag}" && exec "{command[0]}" "{command[1]}" stdio gated-marker; exit 1'],
    )
    hanging = StdioServer(name="hanging", command=command[0], args=["-e", "setInterval(() => {}, 1000)"])
    with trio.fail_after(LIMIT):
        async with MCPExtension([everything()]) as unused:
            pass  # idle -> closed
        async with MCPExtension([gated, everything()]) as mcp:  # everything stays ready: ready -> closed
            model = ScriptedModel([asks(call("a", "gated__echo", message="x")), AssistantMessage("ok")])
            client = await create_agent(model, extensions=[mcp])
            await run(client, "start")  # idle -> connecting -> ready
            [pid] = children_running("gated-marker")
            flag.unlink()
            os.kill(pid, signal.SIGKILL)
            while mcp.state("gated") != "failed":  # ready -> failed
                await trio.sleep(0.05)
            model.add(AssistantMessage("without it"))
            await run(client, "restart fails")  # failed -> connecting -> failed
            assert (mcp.state("gated"), mcp.state("everything")) == ("failed", "ready")
        # failed -> closed
        async with trio.open_nursery() as nursery, MCPExtension([hanging]) as closing:
            waiting = await create_agent(ScriptedModel([AssistantMessage("never mind")]), extensions=[closing])
            nursery.start_soon(waiting.run, "hang")
            while closing.state("hanging") != "connecting":
                await trio.sleep(0.02)
            # connecting -> closed; the request goes on without its tools

    taken = {
        (step.source, step.trigger, step.dest)
        for extension in (unused, mcp, closing)
        for connection in extension.connections.values()
        for step in connection.machine.history
    }
    every = {(source, t.trigger, t.dest) for t in MCP_CONNECTION.main.transitions for source in t.source}
    assert taken == every, f"edges not taken: {every - taken}"


async def test_a_request_cannot_reach_an_extension_opened_in_another_block_once_it_closed() -> None:
    mcp = MCPExtension([])
    async with mcp:
        pass
    with pytest.raises(RuntimeError, match="entered once"):
        async with mcp:
            pass
    assert isinstance(MCPNotOpen("x"), AgentError)


# --- the MCP page's example -------------------------------------------------------------------------------------

MCP_EXAMPLE = re.compile(r"<!-- example: mcp-everything -->\n```python\n(?P<code>.*?)\n```", re.S)


def test_the_documented_example_runs_against_server_everything() -> None:
    npm_server("server-everything")
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed here: the documented example starts server-everything with it")
    repo = Path(__file__).resolve().parents[1]
    match = MCP_EXAMPLE.search((repo / "docs" / "extensions" / "mcp.md").read_text(encoding="utf-8"))
    assert match is not None, "docs/extensions/mcp.md has no mcp-everything example"
    # npx runs the copy installed in tests/mcp_servers; offline, so it can never fetch one instead.
    env = {**os.environ, "PYTHONPATH": str(repo), "npm_config_offline": "true"}
    done = subprocess.run(
        [sys.executable, "-c", match["code"]], cwd=HERE, env=env, capture_output=True, text=True, timeout=LIMIT
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        "started: everything offers everything__get-sum: True",
        "result: The sum of 2 and 3 is 5.",
        "answer: The sum is 5.",
        "state: closed",
    ]

"""AgentHost inside a Starlette app served by hypercorn's asyncio worker on 127.0.0.1.

The browser's view of an agent: start a run, stream its events as JSON lines,
list what waits, answer an approval by POST, cancel by DELETE.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support import asks, call

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ModelRequest,
    ScriptedModel,
    SessionBusy,
    UserMessage,
    create_agent,
    wire,
)
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.host import AgentHost

starlette = pytest.importorskip("starlette", reason="starlette is not installed (pip install -e '.[test]')")
hypercorn = pytest.importorskip("hypercorn", reason="hypercorn is not installed (pip install -e '.[test]')")
httpx = pytest.importorskip("httpx", reason="httpx is not installed (pip install -e '.[test]')")

from hypercorn.asyncio import serve  # noqa: E402
from hypercorn.config import Config  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

LIMIT = 20.0


def ask_then_answer(request: ModelRequest) -> AssistantMessage:
    if isinstance(request.messages[-1], UserMessage):
        return asks(call("q1", "ask_user", question="Deploy?", options=["yes", "no"]))
    return AssistantMessage("deployed")


def make_app(host: AgentHost) -> Starlette:
    async def start(request: Request) -> Response:
        body = await request.json()
        try:
            run = await host.start(body["input"], config=AgentRunConfig(body["session_id"]))
        except SessionBusy as busy:
            return JSONResponse({"error": str(busy)}, status_code=409)
        return JSONResponse({"request_id": run.request_id}, status_code=201)

    async def events(request: Request) -> Response:
        after = int(request.query_params.get("after", "0"))

        async def lines() -> AsyncIterator[str]:
            async for event in host.events(request.path_params["request_id"], after=after):
                yield wire.dumps(event) + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def pending(request: Request) -> Response:
        return JSONResponse(
            [
                {
                    "session_id": p.session_id,
                    "tool_call_id": p.tool_call_id,
                    "event": p.event,
                    "response_event": p.response_event,
                    "payload": p.payload,
                }
                for p in await host.pending()
            ]
        )

    async def deliver(request: Request) -> Response:
        body = await request.json()
        event = ExternalEvent(body["event"], body["payload"])
        delivery = await host.deliver(event, config=AgentRunConfig(body["session_id"]))
        payload = {"accepted": list(delivery.accepted), "refused": dict(delivery.refused)}
        return JSONResponse(payload, status_code=202 if delivery else 409)

    async def cancel(request: Request) -> Response:
        await host.cancel(request.path_params["request_id"])
        return Response(status_code=204)

    return Starlette(
        routes=[
            Route("/runs", start, methods=["POST"]),
            Route("/runs/{request_id}/events", events),
            Route("/runs/{request_id}", cancel, methods=["DELETE"]),
            Route("/pending", pending),
            Route("/answers", deliver, methods=["POST"]),
        ]
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def read_until(lines: AsyncIterator[str], name: str, into: list[dict[str, Any]]) -> None:
    async for line in lines:
        into.append(json.loads(line))
        if into[-1]["type"] == name:
            return


def test_a_starlette_app_under_an_asyncio_server_streams_takes_an_approval_and_cancels() -> None:
    model = ScriptedModel([ask_then_answer], repeat_last=True)
    host = AgentHost(lambda: create_agent(model, extensions=[AskUserExtension()]))
    port = free_port()

    async def scenario(base: str) -> None:
        async with httpx.AsyncClient(base_url=base, timeout=LIMIT) as http:
            created = await http.post("/runs", json={"session_id": "web", "input": "ship it"})
            assert created.status_code == 201
            request_id = created.json()["request_id"]
            busy = await http.post("/runs", json={"session_id": "web", "input": "again"})
            assert busy.status_code == 409 and "already has a running request" in busy.json()["error"]
            seen: list[dict[str, Any]] = []
            async with http.stream("GET", f"/runs/{request_id}/events") as stream:
                lines = stream.aiter_lines()
                await read_until(lines, "ask_user", seen)
                [waiting] = (await http.get("/pending")).json()
                assert waiting["tool_call_id"] == "q1" and waiting["payload"]["options"] == ["yes", "no"]
                wrong = {
                    "session_id": "web",
                    "event": "ask_user_response",
                    "payload": {"tool_call_id": "q1", "answer": 7},
                }
                refused = await http.post("/answers", json=wrong)
                assert refused.status_code == 409 and refused.json()["accepted"] == []
                right = {**wrong, "payload": {"tool_call_id": "q1", "answer": "yes"}}
                assert (await http.post("/answers", json=right)).status_code == 202
                await read_until(lines, "run_completed", seen)
            assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
            assert seen[-1]["result"]["content"] == "deployed"
            # a reload resumes from the last seq it saw
            replay = (await http.get(f"/runs/{request_id}/events", params={"after": seen[5]["seq"]})).text
            assert [json.loads(line) for line in replay.splitlines()] == seen[6:]
            # cancelling from another request of the app
            second = (await http.post("/runs", json={"session_id": "web", "input": "ship it"})).json()["request_id"]
            tail: list[dict[str, Any]] = []
            async with http.stream("GET", f"/runs/{second}/events") as stream:
                lines = stream.aiter_lines()
                await read_until(lines, "ask_user", tail)
                assert (await http.delete(f"/runs/{second}")).status_code == 204
                await read_until(lines, "run_cancelled", tail)
            assert "tool_cancelled" in [e["type"] for e in tail]
            assert (await http.get("/pending")).json() == []

    async def main() -> None:
        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.accesslog = None
        stop = asyncio.Event()
        server = asyncio.create_task(serve(make_app(host), config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            await scenario(f"http://127.0.0.1:{port}")
        finally:
            stop.set()
            await server
            await host.aclose()

    asyncio.run(asyncio.wait_for(main(), LIMIT))

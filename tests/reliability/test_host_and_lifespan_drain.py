"""Closing an AgentHost and an ASGI lifespan shutdown drain: a request that works finishes its turn instead of
being cancelled, a new run is refused (HostClosed; 503 Draining with Retry-After), and a run that only waits
for an answer is not waited for."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import trio

from orchestrator import AgentHost, AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from orchestrator.config import AgentRunConfig
from orchestrator.host import HostClosed
from orchestrator.server import create_app
from tests.support import asks, call

LIMIT = 20


def slow_agent_factory(entered: threading.Event) -> Any:
    @tool(loop="trio")
    async def slow_step() -> str:
        """Take a while."""
        entered.set()
        await trio.sleep(0.5)
        return "step done"

    def step(request: ModelRequest) -> AssistantMessage:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AssistantMessage("finished")
        return asks(call("c1", "slow_step"))

    return lambda: create_agent(ScriptedModel([step], repeat_last=True), tools=[slow_step])


def test_closing_a_host_lets_a_working_request_finish_and_refuses_new_ones() -> None:
    entered = threading.Event()
    host = AgentHost(slow_agent_factory(entered), grace_seconds=10)

    async def main() -> tuple[str, BaseException | None]:
        result = asyncio.ensure_future(host.run("work", config=AgentRunConfig("w")))
        await asyncio.to_thread(entered.wait, LIMIT)
        closing = asyncio.ensure_future(host.aclose())
        await asyncio.sleep(0.05)
        refused: BaseException | None = None
        try:
            await host.start("more", config=AgentRunConfig("other"))
        except HostClosed as error:
            refused = error
        answer = await result
        await closing
        return str(answer.content), refused

    text, refused = asyncio.run(asyncio.wait_for(main(), LIMIT))
    assert text == "finished"
    assert isinstance(refused, HostClosed)
    assert host.state == "closed"
    assert host.client.agent.transitions("w")[-1].dest == "completed"


async def test_a_lifespan_shutdown_refuses_new_runs_with_503_and_waits_for_the_working_run() -> None:
    entered = threading.Event()
    client = await slow_agent_factory(entered)()
    app = create_app(client, grace_seconds=10)
    to_app, app_receives = trio.open_memory_channel[dict[str, Any]](4)
    app_sends, from_app = trio.open_memory_channel[dict[str, Any]](4)

    async def receive() -> dict[str, Any]:
        return await app_receives.receive()

    async def send(message: dict[str, Any]) -> None:
        await app_sends.send(message)

    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery, httpx.AsyncClient(transport=transport, base_url="http://x") as http:
            nursery.start_soon(app, {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
            await to_app.send({"type": "lifespan.startup"})
            assert (await from_app.receive())["type"] == "lifespan.startup.complete"
            started = await http.post("/sessions/w/runs", json={"input": "work"})
            assert started.status_code == 202, started.text
            request_id = started.json()["request_id"]
            await trio.to_thread.run_sync(entered.wait, LIMIT)
            await to_app.send({"type": "lifespan.shutdown"})
            await trio.sleep(0.05)
            refused = await http.post("/sessions/other/runs", json={"input": "more"})
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "5"
            assert refused.json()["error"]["type"] == "Draining"
            assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"
            state = (await http.get(f"/runs/{request_id}")).json()
            assert state["done"] is True and state["state"] == "completed", state

"""The agent app mounted under a prefix in FastAPI, served by uvicorn on asyncio with the agent in an AgentHost.

Runs start and stream there as under hypercorn's trio worker; the open paths of the token (health, the
console's page and files) and the links the app answers with follow the mount's prefix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.host import AgentHost
from orchestrator.server import create_app
from tests.server.support import UvicornThread, read_sse
from tests.support import asks, call

fastapi = pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install -e '.[test]')")


@pytest.fixture
def host() -> Iterator[AgentHost]:
    from orchestrator.extensions.ask_user import AskUserExtension

    model = ScriptedModel(
        [asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"])), AssistantMessage("blue")]
    )
    with AgentHost(lambda: create_agent(model, extensions=[AskUserExtension()])) as running:
        yield running


def _mounted(host: AgentHost) -> Any:
    app = fastapi.FastAPI()

    @app.get("/own")
    async def own() -> dict[str, str]:
        return {"route": "the application's own"}

    app.mount("/agent", create_app(host, token="s3cret"))
    return app


async def test_a_run_is_started_answered_and_streamed_through_a_prefix_mount(host: AgentHost) -> None:
    server = UvicornThread(_mounted(host))
    root = await trio.to_thread.run_sync(server.start)
    auth = {"Authorization": "Bearer s3cret"}
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            with trio.fail_after(20):
                assert (await http.get(f"{root}/own")).json() == {"route": "the application's own"}
                health = await http.get(f"{root}/agent/health")
                assert health.status_code == 200, health.text
                page = await http.get(f"{root}/agent/")
                script = await http.get(f"{root}/agent/static/console.js")
                assert (page.status_code, script.status_code) == (200, 200)
                assert "static/console.js" in page.text
                refused = await http.get(f"{root}/agent/sessions")
                assert refused.status_code == 401 and refused.json()["error"]["type"] == "Unauthorized"
                started = await http.post(f"{root}/agent/sessions/s/runs", json={"input": "paint"}, headers=auth)
                assert started.status_code == 202, started.text
                link = started.json()["events"]
                assert link == f"/agent/runs/{started.json()['request_id']}/events"

                async def reply(event: dict[str, Any]) -> None:
                    if event["type"] == "ask_user":
                        answered = await http.post(
                            f"{root}/agent/sessions/s/events",
                            json={"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "blue"}},
                            headers=auth,
                        )
                        assert answered.status_code == 202, answered.text

                http.headers.update(auth)
                got = await read_sse(http, f"{root}{link}", on_event=reply)
    finally:
        await trio.to_thread.run_sync(server.stop)
    assert got.types[-1] == "run_completed"
    assert '"blue"' in json.dumps(got.events[-1]["result"])
    assert [int(i) for i, _, _ in got.frames] == list(range(1, len(got.frames) + 1))


async def test_an_agent_client_served_by_an_asyncio_server_is_refused_with_the_reason() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("hi")]))
    app = fastapi.FastAPI()
    app.mount("/agent", create_app(client))
    server = UvicornThread(app)
    root = await trio.to_thread.run_sync(server.start)
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            with trio.fail_after(20):
                started = await http.post(f"{root}/agent/sessions/s/runs", json={"input": "hi"})
    finally:
        await trio.to_thread.run_sync(server.stop)
    assert started.status_code == 500
    error = started.json()["error"]
    assert error["type"] == "WrongEventLoop" and "AgentHost" in error["message"]

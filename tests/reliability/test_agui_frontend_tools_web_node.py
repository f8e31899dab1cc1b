"""A frontend tool (``RunAgentInput.tools``) on a cluster's web node: the tool definitions are kept with the run
in the run store, so the worker offers them to the model and, after the run parks on the call, the worker that
resumes it offers them again and the next run's result reaches the waiting call. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import AgentClient, AssistantMessage, ModelRequest, ScriptedModel, create_agent
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.extensions.client_tools import ClientToolsExtension
from orchestrator.store.runs_sql import postgres_run_store, sqlite_run_store
from tests.protocols.agui_support import CLIENT_TOOL, agui_events, last_result, run_input
from tests.server.support import serving
from tests.support import asks, call

assert_valid_agui = pytest.importorskip(
    "ag_ui_validate.pytest_plugin", reason="ag-ui-validate is not installed (pip install -e '.[test]')"
).assert_valid_agui


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "runs.db") if request.param == "sqlite" else str(request.getfixturevalue("postgres_dsn"))


def store(target: str) -> Any:
    return postgres_run_store(target) if target.startswith("postgresql") else sqlite_run_store(target)


async def colour_client(offered: list[tuple[str, list[str]]], label: str) -> AgentClient:
    """Calls the client's confirm_colour, then says what it returned; ``offered`` gets each call's tools."""

    def step(request: ModelRequest) -> AssistantMessage:
        offered.append((label, sorted(t.name for t in request.tools)))
        if not last_result(request):
            return asks(call("f1", "confirm_colour", colour="blue"))
        return AssistantMessage(f"The client said: {last_result(request)}")

    return await create_agent(ScriptedModel([step], repeat_last=True), extensions=[ClientToolsExtension()])


async def test_a_frontend_tool_call_parks_on_the_web_node_and_the_clients_result_reaches_it(target: str) -> None:
    offered: list[tuple[str, list[str]]] = []
    stores = [store(target) for _ in range(3)]
    with trio.fail_after(60):
        async with (
            trio.open_nursery() as nursery,
            serving(StoreBackend(stores[0], poll_seconds=0.02)) as base,  # type: ignore[arg-type]
            httpx.AsyncClient(timeout=20) as http,
        ):
            # one worker carries the run until it parks on the call, and stops
            first_worker = trio.CancelScope()

            async def carry(worker: Worker, scope: trio.CancelScope) -> None:
                with scope:
                    await worker.run()

            first_agent = await colour_client(offered, "first")
            nursery.start_soon(carry, Worker(first_agent, stores[1], poll_seconds=0.05), first_worker)
            first = await agui_events(http, base, run_input("ft", "pick", tools=[CLIENT_TOOL]))
            assert_valid_agui(first)
            [asked] = first[-1]["outcome"]["interrupts"]
            assert asked["reason"] == "client_tool_call" and asked["toolCallId"] == "f1"
            assert asked["responseSchema"]["required"] == ["content"]

            while (await trio.to_thread.run_sync(stores[0].run, first[0]["runId"])).status != "parked":
                await trio.sleep(0.02)  # parked: no worker holds the run
            first_worker.cancel()
            # another worker, with an agent of its own that was never told of the tool, resumes the run
            second_worker = Worker(await colour_client(offered, "second"), stores[2], poll_seconds=0.05)
            nursery.start_soon(carry, second_worker, trio.CancelScope())

            bad = [{"interruptId": asked["id"], "status": "resolved", "payload": {"content": 7}}]
            refused = await agui_events(http, base, run_input("ft", resume=bad))
            assert refused[-1]["type"] == "RUN_ERROR" and refused[-1]["code"] == "AnswerRefused", refused[-1]
            assert "content" in refused[-1]["message"]

            good = [{"interruptId": asked["id"], "status": "resolved", "payload": {"content": "blue, confirmed"}}]
            second = await agui_events(http, base, run_input("ft", resume=good))
            assert_valid_agui(second)
            result = next(e for e in second if e["type"] == "TOOL_CALL_RESULT")
            assert result["toolCallId"] == "f1" and result["content"] == "blue, confirmed"
            assert second[-1]["type"] == "RUN_FINISHED" and second[-1]["result"] == "The client said: blue, confirmed"
            nursery.cancel_scope.cancel()
    for each in stores:
        each.close()
    # the model saw the client's tool in its first call, and again on the second worker after the result
    assert offered == [("first", ["confirm_colour"]), ("second", ["confirm_colour"])], offered


async def test_frontend_tools_too_large_to_keep_with_the_run_are_a_400_with_the_reason() -> None:
    client = await colour_client([], "only")
    huge = {**CLIENT_TOOL, "description": "x" * 20_000}
    async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{base}/ag-ui", json=run_input("big", tools=[huge]))
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] and "'tools' cannot be kept with the run" in error["message"]
        assert "bytes" in error["message"]
        assert (await http.get(f"{base}/sessions/big")).status_code == 404

"""How many finished runs the service keeps reachable: a late SSE reader of an older run still gets it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from orchestrator import AgentClient, AssistantMessage, ScriptedModel, create_agent
from orchestrator.runtime.handle import RETAINED_RUNS
from orchestrator.server import create_app
from tests.server.support import Serving, read_sse


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=20) as client:
        yield client


async def _answering(count: int) -> AgentClient:
    return await create_agent(ScriptedModel([AssistantMessage(f"answer {n}") for n in range(count)]))


async def _finish_runs(http: httpx.AsyncClient, base: str, count: int) -> list[str]:
    """Run ``count`` requests one after another to their end; their request ids, oldest first."""
    request_ids = []
    for n in range(count):
        started = await http.post(f"{base}/sessions/s{n}/runs", json={"input": "hi"})
        assert started.status_code == 202, started.text
        request_id = started.json()["request_id"]
        got = await read_sse(http, f"{base}/runs/{request_id}/events")
        assert got.types[-1] == "run_completed"
        request_ids.append(request_id)
    return request_ids


async def test_by_default_more_finished_runs_than_an_agent_keeps_stay_readable(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    count = RETAINED_RUNS + 6
    client = await _answering(count)
    with trio.fail_after(120):
        async with serving(client) as base:
            request_ids = await _finish_runs(http, base, count)
            oldest = await read_sse(http, f"{base}/runs/{request_ids[0]}/events")
            run = await http.get(f"{base}/runs/{request_ids[0]}")
    assert oldest.types[-1] == "run_completed"
    assert oldest.events[-1]["result"]["content"] == "answer 0"
    assert run.status_code == 200 and run.json()["done"] is True


async def test_retained_runs_bounds_the_finished_runs_kept_reachable(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    client = await _answering(4)
    with trio.fail_after(60):
        async with serving(client, retained_runs=3) as base:
            request_ids = await _finish_runs(http, base, 4)
            gone = await http.get(f"{base}/runs/{request_ids[0]}/events")
            kept = await read_sse(http, f"{base}/runs/{request_ids[1]}/events")
    assert gone.status_code == 404
    assert gone.json()["error"]["type"] == "NotFound"
    assert request_ids[0] in gone.json()["error"]["message"]
    assert kept.events[-1]["result"]["content"] == "answer 1"


async def test_retained_runs_below_one_is_refused() -> None:
    client = await _answering(1)
    with pytest.raises(ValueError, match="retained_runs"):
        create_app(client, retained_runs=0)

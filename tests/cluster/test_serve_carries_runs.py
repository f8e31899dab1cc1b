"""``serve --db URL --app M:A``: one process serves the store's runs and carries them, with no worker beside it.

A run started there parks on its question and goes on once answered; a run parked when the
process was killed (kill -9) goes on in the next process started on the same store, with the
answer posted while no process was running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.cluster.processes import APP, Cluster
from tests.server.support import read_sse


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(f"sqlite:///{tmp_path / 'runs.db'}", tmp_path, tmp_path / "marks") as running:
        yield running


async def answer(http: httpx.AsyncClient, base: str, session_id: str, tool_call_id: str) -> None:
    answered = await http.post(
        f"{base}/sessions/{session_id}/events",
        json={"name": "ask_user_response", "payload": {"tool_call_id": tool_call_id, "answer": "yes"}},
    )
    assert answered.status_code == 202, answered.text


async def test_one_serving_process_carries_its_runs_and_goes_on_after_a_kill(cluster: Cluster) -> None:
    try:
        with trio.fail_after(90):
            async with httpx.AsyncClient(timeout=10) as http:
                first = cluster.web("one", app=APP)
                assert "carrying runs as worker" in first.output()
                started = await http.post(f"{first.url}/sessions/s1/runs", json={"input": "paint"})
                request_id = started.json()["request_id"]
                parked = await read_sse(http, f"{first.url}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked")
                await answer(http, first.url, "s1", parked.events[-1]["waiting"][0])
                done = await read_sse(http, f"{first.url}/runs/{request_id}/events", last_event_id=parked.events[-1]["seq"])
                assert done.types[-1] == "run_completed", done.types

                started = await http.post(f"{first.url}/sessions/s2/runs", json={"input": "glaze"})
                request_id = started.json()["request_id"]
                parked = await read_sse(http, f"{first.url}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked")
                first.kill()
                # Answered while no process runs: a web node with no agent takes it into the store's inbox.
                bare = cluster.web("bare")
                await answer(http, bare.url, "s2", parked.events[-1]["waiting"][0])
                await trio.sleep(0.5)
                assert (await http.get(f"{bare.url}/runs/{request_id}")).json()["done"] is False
                second = cluster.web("two", app=APP)
                rest = await read_sse(http, f"{second.url}/runs/{request_id}/events", last_event_id=parked.events[-1]["seq"])
        events = parked.events + rest.events
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events[-1]["type"] == "run_completed" and events[-1]["result"]["content"] == "Done with glaze: yes."
        assert [e["type"] for e in events].count("ask_user") == 1  # asked once, across the kill
        assert sorted(cluster.records()) == ["glaze", "paint"]
    except BaseException:
        print(cluster.logs())
        raise

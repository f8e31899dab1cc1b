"""Worker and web node processes on one real PostgreSQL server: many runs, crashes, retries, busy sessions.

Every test starts its own processes (``python -m orchestrator worker`` and
``serve``) on a fresh database of the throwaway server, talks to the web nodes
over HTTP like a client would, and checks the outcome in the HTTP answers, the
event streams, the session histories, the store's rows and the lines the
``record`` tool wrote (one per call that ran).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.cluster.processes import Cluster
from tests.server.support import SSE, read_sse


@pytest.fixture
def cluster(postgres_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(postgres_dsn, tmp_path, tmp_path / "marks") as running:
        yield running


def other(urls: list[str], url: str) -> str:
    return urls[1 - urls.index(url)]


async def answer_when_parked(http: httpx.AsyncClient, base: str, session_id: str, key: str | None = None) -> Any:
    """An SSE callback answering "yes" to the question a parked run waits on, through ``base``."""

    async def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "run_parked":
            headers = {"Idempotency-Key": key} if key else {}
            for tool_call_id in event["waiting"]:
                answered = await http.post(
                    f"{base}/sessions/{session_id}/events",
                    json={"name": "ask_user_response", "payload": {"tool_call_id": tool_call_id, "answer": "yes"}},
                    headers=headers,
                )
                assert answered.status_code == 202, answered.text

    return on_event


def assert_one_result_per_call(messages: list[dict[str, Any]]) -> None:
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(results) == sorted(calls), (calls, results)
    assert len(set(results)) == len(results), results


def assert_complete_stream(got: SSE) -> None:
    seqs = [event["seq"] for event in got.events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert got.types[-1] == "run_completed", (got.types[-8:], got.events[-1])


async def test_fifty_runs_on_two_workers_answered_through_the_other_web_node(cluster: Cluster) -> None:
    for name in ("worker-a", "worker-b"):
        cluster.worker(name, lease_seconds=5)
    urls = [cluster.web("web-a").url, cluster.web("web-b").url]
    runs = 50
    live: dict[str, SSE] = {}
    started_on: dict[str, str] = {}
    try:
        with trio.fail_after(90):
            async with httpx.AsyncClient(timeout=30) as http, trio.open_nursery() as nursery:

                async def one(index: int) -> None:
                    session_id = f"s{index}"
                    base = urls[index % 2]
                    started = await http.post(f"{base}/sessions/{session_id}/runs", json={"input": f"job {index}"})
                    assert started.status_code == 202, started.text
                    request_id = started.json()["request_id"]
                    started_on[request_id] = base
                    on_event = await answer_when_parked(http, other(urls, base), session_id)
                    live[request_id] = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=on_event)

                for index in range(runs):
                    nursery.start_soon(one, index)

            async with httpx.AsyncClient(timeout=30) as http:
                for request_id, got in live.items():
                    assert_complete_stream(got)
                    assert "run_parked" in got.types and "run_resumed" in got.types
                    index = int(got.events[0]["session_id"][1:])
                    assert got.events[-1]["result"]["content"] == f"Done with job {index}: yes."
                    for base in urls:  # replay from either node, from the start and from the middle
                        replay = await read_sse(http, f"{base}/runs/{request_id}/events", last_event_id=0)
                        assert [e["seq"] for e in replay.events] == [e["seq"] for e in got.events]
                        assert replay.events == got.events
                        middle = len(got.events) // 2
                        rest = await read_sse(http, f"{base}/runs/{request_id}/events", last_event_id=middle)
                        assert rest.events == got.events[middle:]
                    session = (await http.get(f"{other(urls, started_on[request_id])}/sessions/s{index}")).json()
                    roles = [m["role"] for m in session["messages"]]
                    assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"], roles
                    assert_one_result_per_call(session["messages"])
    except BaseException:
        print(cluster.logs())
        raise
    assert len(live) == runs
    assert sorted(cluster.records()) == sorted(f"job {i}" for i in range(runs))
    statuses = cluster.query("SELECT status, count(*) FROM orchestrator_runs GROUP BY status")
    assert statuses == [("completed", runs)], statuses
    resumed = cluster.query("SELECT body FROM orchestrator_run_events WHERE type = 'run_resumed'")
    carried_by = {json.loads(str(body))["worker"] for (body,) in resumed}
    assert carried_by == {"worker-a", "worker-b"}, carried_by

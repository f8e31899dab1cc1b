"""Web nodes under uvicorn on asyncio, several processes, and one worker process, on one run store.

Each run is started, streamed, answered and streamed again after a reconnect through a
process picked at random: every stream is gapless and ends in the run's terminal event,
on SQLite (one machine) and on PostgreSQL.
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import trio

from tests.cluster.processes import Cluster
from tests.server.support import read_sse

RUNS = 20


async def drive(cluster: Cluster, urls: list[str], seed: int) -> None:
    pick = random.Random(seed)

    async def one(http: httpx.AsyncClient, index: int) -> None:
        session_id = f"u{index}"
        started = await http.post(f"{pick.choice(urls)}/sessions/{session_id}/runs", json={"input": f"job {index}"})
        assert started.status_code == 202, started.text
        request_id = started.json()["request_id"]
        answered: list[str] = []

        async def answer(event: dict[str, Any]) -> None:
            if event["type"] == "run_parked" and not answered:
                for tool_call_id in event["waiting"]:
                    ok = await http.post(
                        f"{pick.choice(urls)}/sessions/{session_id}/events",
                        json={"name": "ask_user_response", "payload": {"tool_call_id": tool_call_id, "answer": "yes"}},
                        headers={"Idempotency-Key": f"answer-{index}"},
                    )
                    assert ok.status_code == 202, ok.text
                    answered.append(tool_call_id)

        # Read up to the question from one process, then reconnect to another after the last seen event.
        first = await read_sse(
            http, f"{pick.choice(urls)}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked"
        )
        assert first.types[-1] == "run_parked", first.types
        await answer(first.events[-1])
        rest = await read_sse(
            http, f"{pick.choice(urls)}/runs/{request_id}/events", last_event_id=first.events[-1]["seq"]
        )
        events = first.events + rest.events
        seqs = [event["seq"] for event in events]
        assert seqs == list(range(1, len(seqs) + 1)), seqs
        assert events[-1]["type"] == "run_completed", [e["type"] for e in events]
        assert events[-1]["result"]["content"] == f"Done with job {index}: yes."
        # The commit that wrote run_completed set the final status: every process reads the run ended.
        state = await http.get(f"{pick.choice(urls)}/runs/{request_id}")
        assert state.status_code == 200 and state.json()["done"] is True, state.text
        assert state.json()["state"] == "completed", state.text

    with trio.fail_after(120):
        async with httpx.AsyncClient(timeout=30) as http, trio.open_nursery() as nursery:
            for index in range(RUNS):
                nursery.start_soon(one, http, index)
    assert sorted(cluster.records()) == sorted(f"job {index}" for index in range(RUNS))


async def test_uvicorn_web_nodes_and_a_worker_carry_runs_on_sqlite(sqlite_cluster: Cluster) -> None:
    try:
        urls = [sqlite_cluster.uvicorn_web("web-a", workers=2).url, sqlite_cluster.uvicorn_web("web-b").url]
        sqlite_cluster.worker("worker")
        await drive(sqlite_cluster, urls, seed=1)
    except BaseException:
        print(sqlite_cluster.logs())
        raise


async def test_a_web_node_shutting_down_ends_its_streams_and_another_continues_them(sqlite_cluster: Cluster) -> None:
    """SIGTERM to one uvicorn web node: its open stream ends within a second with a closing frame; the
    reader reconnects to the other node after its last event and misses nothing."""
    leaving, staying = sqlite_cluster.uvicorn_web("leaving"), sqlite_cluster.uvicorn_web("staying")
    sqlite_cluster.worker("worker")
    frames: list[tuple[str, str]] = []
    with trio.fail_after(60):
        async with httpx.AsyncClient(timeout=30) as http:
            started = await http.post(f"{leaving.url}/sessions/s1/runs", json={"input": "paint"})
            request_id = started.json()["request_id"]
            seen = 0
            async with http.stream("GET", f"{leaving.url}/runs/{request_id}/events") as response:
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        frames.append(("event", line.removeprefix("event: ")))
                    elif line.startswith("id: "):
                        seen = int(line.removeprefix("id: "))
                    if frames and frames[-1] == ("event", "run_parked"):
                        leaving.process.terminate()  # SIGTERM
                        stopped_at = trio.current_time()
                        frames.append(("sent", "SIGTERM"))
            assert frames[-1] == ("event", "closing"), frames
            assert trio.current_time() - stopped_at < 2.0
            assert (await http.get(f"{staying.url}/runs/{request_id}")).json()["done"] is False
            pending = (await http.get(f"{staying.url}/sessions/s1")).json()["pending"]
            answered = await http.post(
                f"{staying.url}/sessions/s1/events",
                json={"name": "ask_user_response", "payload": {"tool_call_id": pending[0]["tool_call_id"], "answer": "yes"}},
            )
            assert answered.status_code == 202, answered.text
            rest = await read_sse(http, f"{staying.url}/runs/{request_id}/events", last_event_id=seen)
    assert rest.events[0]["seq"] == seen + 1
    assert rest.types[-1] == "run_completed", rest.types
    # uvicorn shuts down gracefully, then ends by the signal it was sent (it re-raises SIGTERM).
    assert leaving.process.wait(10) in (0, -15)
    assert "Finished server process" in leaving.output(), leaving.output()


async def test_uvicorn_web_nodes_and_a_worker_carry_runs_on_postgresql(postgres_cluster: Cluster) -> None:
    try:
        urls = [postgres_cluster.uvicorn_web("web-a", workers=2).url, postgres_cluster.uvicorn_web("web-b").url]
        postgres_cluster.worker("worker")
        await drive(postgres_cluster, urls, seed=2)
    except BaseException:
        print(postgres_cluster.logs())
        raise

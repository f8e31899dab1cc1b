"""``serve`` with a plain ``--db PATH`` (or none) keeps the default agent's runs in the file's run store and carries
them itself: a run killed (kill -9) while it waits for an answer goes on by itself when ``serve`` starts again on
the file, with the answer posted while nothing ran or after the restart, and no new user message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.cluster.processes import Cluster
from tests.server.support import read_sse


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(f"sqlite:///{tmp_path / 'agent.db'}", tmp_path, tmp_path / "marks") as running:
        yield running


async def approve(http: httpx.AsyncClient, base: str, waiting: dict[str, object]) -> None:
    answered = await http.post(
        f"{base}/sessions/s1/events",
        json={
            "name": waiting["response_event"],
            "payload": {"tool_call_id": waiting["tool_call_id"], "approved": True},
        },
    )
    assert answered.status_code == 202, answered.text


async def parked_on(http: httpx.AsyncClient, base: str, request_id: str, after: int) -> tuple[int, dict[str, object]]:
    """Follow the run from ``after`` until it parks; its last seq and the one call it waits for."""
    url = f"{base}/runs/{request_id}/events"
    got = await read_sse(http, url, last_event_id=after, stop=lambda e: e["type"] == "run_parked")
    assert got.types[-1] == "run_parked", got.types
    pending = (await http.get(f"{base}/sessions/s1")).json()["pending"]
    assert len(pending) == 1 and pending[0]["request_id"] == request_id, pending
    return got.events[-1]["seq"], pending[0]


async def test_a_run_killed_while_it_waits_goes_on_by_itself_when_serve_starts_again(cluster: Cluster) -> None:
    try:
        with trio.fail_after(120):
            async with httpx.AsyncClient(timeout=10) as http:
                first = cluster.serve_default("first")
                assert "carrying runs as worker" in first.output()
                started = await http.post(f"{first.url}/sessions/s1/runs", json={"input": "tidy the notes"})
                assert started.status_code == 202, started.text
                request_id = started.json()["request_id"]
                seq, waiting = await parked_on(http, first.url, request_id, 0)
                assert waiting["event"] == "enter_plan_mode"
                first.kill()

                # Answered while no serve runs: a web node on the file (no agent) takes it into the run's inbox.
                bare = cluster.web("bare")
                await approve(http, bare.url, waiting)
                await trio.sleep(0.5)
                assert (await http.get(f"{bare.url}/runs/{request_id}")).json()["done"] is False
                bare.process.terminate()
                bare.process.wait(10)

                second = cluster.serve_default("second")
                seq, waiting = await parked_on(http, second.url, request_id, seq)
                assert waiting["event"] == "exit_plan_mode"
                second.kill()

                # Answered after the restart, to the serve that carries the run again.
                third = cluster.serve_default("third")
                await approve(http, third.url, waiting)
                done = await read_sse(http, f"{third.url}/runs/{request_id}/events", last_event_id=seq)
                session = (await http.get(f"{third.url}/sessions/s1")).json()
        assert done.types[-1] == "run_completed", done.types
        assert done.events[-1]["result"]["content"] == "Plan approved; Plan Mode has ended."
        users = [m["content"] for m in session["messages"] if m["role"] == "user"]
        assert users == ["tidy the notes"]  # it went on with no new user message
        assert session["pending"] == [] and session["request_id"] is None
    except BaseException:
        print("\n".join(f"--- {node.name}\n{node.output()[-3000:]}" for node in cluster.nodes))
        raise

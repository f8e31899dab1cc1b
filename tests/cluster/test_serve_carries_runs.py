"""``serve --db URL --app M:A``: one process serves the store's runs and carries them, with no worker beside it.

A run started there parks on its question and goes on once answered; a run parked when the
process was killed (kill -9) goes on in the next process started on the same store, with the
answer posted while no process was running. The sessions it carries are listed with their titles, titled
and forked through its run store as on any web node.
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


async def finish(http: httpx.AsyncClient, base: str, session_id: str, text: str) -> None:
    """Start a run of ``session_id`` with ``text``, fork it in vain while it waits for its answer, answer it, and
    read it to its end."""
    started = await http.post(f"{base}/sessions/{session_id}/runs", json={"input": text})
    assert started.status_code == 202, started.text
    request_id = started.json()["request_id"]
    parked = await read_sse(http, f"{base}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked")
    busy = await http.post(f"{base}/sessions/{session_id}/fork", json={})
    assert busy.status_code == 409 and busy.json()["error"]["type"] == "SessionBusy", busy.text
    await answer(http, base, session_id, parked.events[-1]["waiting"][0])
    done = await read_sse(http, f"{base}/runs/{request_id}/events", last_event_id=parked.events[-1]["seq"])
    assert done.types[-1] == "run_completed", done.types


async def test_one_serving_process_lists_titles_forks_and_sets_titles_of_the_sessions_it_carries(
    cluster: Cluster,
) -> None:
    try:
        with trio.fail_after(90):
            async with httpx.AsyncClient(timeout=10) as http:
                base = cluster.web("one", app=APP).url
                assert (await http.get(f"{base}/")).status_code == 200  # the console, which lists GET /sessions
                await finish(http, base, "s1", "paint")
                listed = (await http.get(f"{base}/sessions")).json()["sessions"]
                assert [(s["session_id"], s["title"], s["request_id"]) for s in listed] == [("s1", "paint", None)]
                titled = await http.put(f"{base}/sessions/s1/title", json={"title": "Painting"})
                assert titled.json() == {"session_id": "s1", "title": "Painting"}, titled.text
                source = (await http.get(f"{base}/sessions/s1")).json()

                forked = await http.post(f"{base}/sessions/s1/fork", json={"turn": 1, "session_id": "s1-again"})
                assert forked.status_code == 201, forked.text
                copied = len(source["messages"])
                assert forked.json() == {"session_id": "s1-again", "forked_from": "s1", "messages": copied}
                # The fork goes on as a session of its own: its run sees the copied answer, so it asks nothing.
                started = await http.post(f"{base}/sessions/s1-again/runs", json={"input": "glaze"})
                assert started.status_code == 202, started.text
                done = await read_sse(http, f"{base}/runs/{started.json()['request_id']}/events")
                assert done.events[-1]["result"]["content"] == "Done with glaze: yes.", done.types

                listed = (await http.get(f"{base}/sessions")).json()["sessions"]
                titles = {s["session_id"]: s["title"] for s in listed}
                assert titles == {"s1": "Painting", "s1-again": "Painting (fork)"}
                fork = (await http.get(f"{base}/sessions/s1-again")).json()
                assert fork["messages"][: len(source["messages"])] == source["messages"]
                assert len(fork["messages"]) > len(source["messages"])
                assert (await http.get(f"{base}/sessions/s1")).json()["messages"] == source["messages"]
        assert cluster.records() == ["paint"]
    except BaseException:
        print(cluster.logs())
        raise

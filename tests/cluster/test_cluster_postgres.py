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

from tests.cluster.answers import answer_yes
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
            for tool_call_id in event["waiting"]:
                await answer_yes(http, base, session_id, tool_call_id, key=key)

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


async def wait_until(predicate: Any, what: str, seconds: float = 30.0) -> None:
    with trio.move_on_after(seconds):
        while not predicate():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"not within {seconds:g} s: {what}")


async def test_a_killed_workers_runs_are_finished_by_the_other_exactly_once(cluster: Cluster) -> None:
    worker_a = cluster.worker("worker-a", lease_seconds=2)
    urls = [cluster.web("web-a").url, cluster.web("web-b").url]
    try:
        with trio.fail_after(90):
            async with httpx.AsyncClient(timeout=30) as http:
                ids = {}
                for session_id, text in (("s-wait", "job wait"), ("s-slow", "slow job")):
                    started = await http.post(f"{urls[0]}/sessions/{session_id}/runs", json={"input": text})
                    assert started.status_code == 202, started.text
                    ids[session_id] = started.json()["request_id"]
                # s-wait parks on its question; s-slow is inside its 3 s record call: kill -9 the worker.
                parked = await read_sse(
                    http, f"{urls[0]}/runs/{ids['s-wait']}/events", stop=lambda e: e["type"] == "run_parked"
                )
                await wait_until(lambda: "slow job" in cluster.records(), "the slow record call started")
                worker_a.kill()
                # Acknowledged while no worker runs: the answer waits in the inbox.
                await answer_yes(http, urls[1], "s-wait", parked.events[-1]["waiting"][0])
                cluster.worker("worker-b", lease_seconds=2)
                streams = {}
                for session_id, request_id in ids.items():  # s-wait was answered above; s-slow is answered here
                    on_event = await answer_when_parked(http, urls[1], session_id) if session_id == "s-slow" else None
                    streams[session_id] = await read_sse(
                        http, f"{urls[1]}/runs/{request_id}/events", last_event_id=0, on_event=on_event
                    )
                histories = {s: (await http.get(f"{urls[0]}/sessions/{s}")).json()["messages"] for s in ids}
    except BaseException:
        print(cluster.logs())
        raise
    for session_id, got in streams.items():
        assert_complete_stream(got)
        resumed = [e["worker"] for e in got.events if e["type"] == "run_resumed"]
        assert resumed and resumed[-1] == "worker-b", resumed
        assert_one_result_per_call(histories[session_id])
    assert streams["s-wait"].events[-1]["result"]["content"] == "Done with job wait: yes."
    assert streams["s-slow"].events[-1]["result"]["content"] == "Done with slow job: yes."
    # The interrupted record call was not run again: it has the failed "worker stopped" result.
    results = {m["name"]: m for m in histories["s-slow"] if m["role"] == "tool"}
    assert results["record"]["status"] == "failed", results
    assert "worker running this call stopped" in results["record"]["content"]
    assert results["ask_user"]["content"] == "yes"
    assert sorted(cluster.records()) == ["job wait", "slow job"]
    # The answer acknowledged while no worker ran reached its run, once.
    waits = [m for m in histories["s-wait"] if m["role"] == "tool" and m["name"] == "ask_user"]
    assert [m["content"] for m in waits] == ["yes"]
    assert cluster.query("SELECT count(*) FROM orchestrator_inbox WHERE consumed = 0") == [(0,)]


async def test_retried_and_duplicate_answers_to_either_node_make_one_inbox_item_and_one_result(
    cluster: Cluster,
) -> None:
    cluster.worker("worker-a")
    cluster.worker("worker-b")
    urls = [cluster.web("web-a").url, cluster.web("web-b").url]
    try:
        with trio.fail_after(60):
            async with httpx.AsyncClient(timeout=30) as http:
                body = {"input": "job dup"}
                key = {"Idempotency-Key": "start-1"}
                started = await http.post(f"{urls[0]}/sessions/s1/runs", json=body, headers=key)
                assert started.status_code == 202, started.text
                request_id = started.json()["request_id"]
                again = await http.post(f"{urls[0]}/sessions/s1/runs", json=body, headers=key)
                assert (again.status_code, again.json()["request_id"]) == (202, request_id)
                elsewhere = await http.post(f"{urls[1]}/sessions/s1/runs", json=body, headers=key)
                # The other node finds the run the key started: the same answer, no second run.
                assert (elsewhere.status_code, elsewhere.json()["request_id"]) == (202, request_id), elsewhere.text

                async def answer_many(event: dict[str, Any]) -> None:
                    if event["type"] != "run_parked":
                        return
                    answer = {
                        "name": "ask_user_response",
                        "payload": {"tool_call_id": event["waiting"][0], "answer": "yes"},
                    }
                    for base in (*urls, *urls):
                        posted = await http.post(
                            f"{base}/sessions/s1/events", json=answer, headers={"Idempotency-Key": "answer-1"}
                        )
                        assert posted.status_code == 202, posted.text

                got = await read_sse(http, f"{urls[1]}/runs/{request_id}/events", on_event=answer_many)
                history = (await http.get(f"{urls[0]}/sessions/s1")).json()["messages"]
    except BaseException:
        print(cluster.logs())
        raise
    assert_complete_stream(got)
    assert got.events[-1]["result"]["content"] == "Done with job dup: yes."
    assert_one_result_per_call(history)
    assert [m["content"] for m in history if m["role"] == "tool" and m["name"] == "ask_user"] == ["yes"]
    assert cluster.query("SELECT count(*), sum(consumed) FROM orchestrator_inbox") == [(1, 1)]
    assert cluster.query("SELECT count(*) FROM orchestrator_runs") == [(1,)]
    assert cluster.records() == ["job dup"]


async def test_one_running_request_per_session_across_the_cluster(cluster: Cluster) -> None:
    cluster.worker("worker-a")
    urls = [cluster.web("web-a").url, cluster.web("web-b").url]
    try:
        with trio.fail_after(60):
            async with httpx.AsyncClient(timeout=30) as http:
                started = await http.post(f"{urls[0]}/sessions/s1/runs", json={"input": "job one"})
                assert started.status_code == 202, started.text
                request_id = started.json()["request_id"]
                refusals = [await http.post(f"{base}/sessions/s1/runs", json={"input": "job two"}) for base in urls]
                parked = await read_sse(
                    http, f"{urls[1]}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked"
                )
                # Parked (held by no worker), the run still is the session's one running request.
                refusals += [await http.post(f"{base}/sessions/s1/runs", json={"input": "job two"}) for base in urls]
                other_session = await http.post(f"{urls[1]}/sessions/s2/runs", json={"input": "job other"})
                on_event = await answer_when_parked(http, urls[0], "s1")
                await on_event(parked.events[-1])
                await read_sse(http, f"{urls[0]}/runs/{request_id}/events", last_event_id=parked.events[-1]["seq"])
                after = await http.post(f"{urls[1]}/sessions/s1/runs", json={"input": "job three"})
    except BaseException:
        print(cluster.logs())
        raise
    assert [r.status_code for r in refusals] == [409, 409, 409, 409], [r.text for r in refusals]
    assert all(r.json()["error"]["type"] == "SessionBusy" for r in refusals)
    assert other_session.status_code == 202, other_session.text
    assert after.status_code == 202, after.text
    assert cluster.query("SELECT count(*) FROM orchestrator_runs WHERE session_id = 's1'") == [(2,)]

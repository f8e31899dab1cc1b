"""Workers and a web node over one SQLite run store, in one process: parking, resuming, fencing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.store.runs_sql import sqlite_run_store
from tests.cluster import apps
from tests.server.support import read_sse, serving


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")
    return tmp_path / "marks"


async def test_a_run_parks_on_its_question_and_any_worker_resumes_it_with_the_answer(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    web_store, store_a, store_b = sqlite_run_store(path), sqlite_run_store(path), sqlite_run_store(path)
    worker_a = Worker(await apps.approval_agent(), store_a, name="a", poll_seconds=0.05)
    worker_b = Worker(await apps.approval_agent(), store_b, name="b", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=10) as http:
            await nursery.start(worker_a.run)
            await nursery.start(worker_b.run)
            async with serving(StoreBackend(web_store, poll_seconds=0.02)) as base:  # type: ignore[arg-type]
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "paint"})
                assert started.status_code == 202, started.text
                request_id = started.json()["request_id"]
                busy = await http.post(f"{base}/sessions/s1/runs", json={"input": "again"})
                assert busy.status_code == 409

                async def answer(event: dict[str, Any]) -> None:
                    if event["type"] == "run_parked":
                        wrong = await http.post(
                            f"{base}/sessions/s1/events",
                            json={"name": "ask_user_response", "payload": {"tool_call_id": event["waiting"][0], "answer": "maybe"}},
                        )
                        assert wrong.status_code == 409, wrong.text
                        assert "one of" in wrong.text
                        for _ in range(2):
                            ok = await http.post(
                                f"{base}/sessions/s1/events",
                                json={"name": "ask_user_response", "payload": {"tool_call_id": event["waiting"][0], "answer": "yes"}},
                                headers={"Idempotency-Key": "answer-1"},
                            )
                            assert ok.status_code == 202, ok.text

                got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=answer)
                session = (await http.get(f"{base}/sessions/s1")).json()
            nursery.cancel_scope.cancel()
    types = got.types
    assert types[-1] == "run_completed", types
    assert "run_parked" in types and "run_resumed" in types
    assert got.events[-1]["result"]["content"] == "Done with paint: yes."
    seqs = [e["seq"] for e in got.events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert (apps.MARKS / "record.log").read_text().splitlines() == ["paint"]
    roles = [m["role"] for m in session["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"], roles
    results = [m["tool_call_id"] for m in session["messages"] if m["role"] == "tool"]
    assert len(results) == len(set(results))


async def test_a_retried_start_with_one_idempotency_key_gets_the_same_run_from_either_web_node(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    store_a, store_b = sqlite_run_store(path), sqlite_run_store(path)
    key = {"Idempotency-Key": "start-1"}
    with trio.fail_after(30):
        async with httpx.AsyncClient(timeout=10) as http:
            async with (
                serving(StoreBackend(store_a, poll_seconds=0.02)) as node_a,  # type: ignore[arg-type]
                serving(StoreBackend(store_b, poll_seconds=0.02)) as node_b,  # type: ignore[arg-type]
            ):
                first = await http.post(f"{node_a}/sessions/s1/runs", json={"input": "paint"}, headers=key)
                elsewhere = await http.post(f"{node_b}/sessions/s1/runs", json={"input": "paint"}, headers=key)
                reused = await http.post(f"{node_b}/sessions/s1/runs", json={"input": "sand"}, headers=key)
                other_key = await http.post(
                    f"{node_b}/sessions/s1/runs", json={"input": "paint"}, headers={"Idempotency-Key": "start-2"}
                )
                unkeyed = await http.post(f"{node_b}/sessions/s1/runs", json={"input": "paint"})
                # The same key in another session is another operation.
                s2 = await http.post(f"{node_b}/sessions/s2/runs", json={"input": "paint"}, headers=key)

                # Both nodes asked at once, again and again: one run, one id.
                answers: list[httpx.Response] = []

                async def post(base: str) -> None:
                    answers.append(await http.post(f"{base}/sessions/s3/runs", json={"input": "race"}, headers=key))

                async with trio.open_nursery() as nursery:
                    for base in (node_a, node_b, node_a, node_b):
                        nursery.start_soon(post, base)
    assert first.status_code == 202, first.text
    request_id = first.json()["request_id"]
    assert (elsewhere.status_code, elsewhere.json()["request_id"]) == (202, request_id), elsewhere.text
    assert (reused.status_code, reused.json()["error"]["type"]) == (422, "IdempotencyKeyReused"), reused.text
    assert [other_key.status_code, unkeyed.status_code] == [409, 409]
    assert other_key.json()["error"]["type"] == "SessionBusy"
    assert s2.status_code == 202 and s2.json()["request_id"] != request_id
    assert [a.status_code for a in answers] == [202] * 4, [a.text for a in answers]
    assert len({a.json()["request_id"] for a in answers}) == 1
    assert [(r.request_id, r.status) for r in store_a.runs("s1")] == [(request_id, "queued")]
    assert len(store_a.runs("s3")) == 1

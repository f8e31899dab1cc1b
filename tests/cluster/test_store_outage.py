"""A run store whose PostgreSQL connections are cut (as a server restart or a proxy would) connects again.

The connections are ended from the server's side with ``pg_terminate_backend``,
on the throwaway server of ``tests/pg.py``: the call that was using one fails
with StoreUnavailable (an HTTP 503 at a web node), the next call connects
again, and a worker carrying a parked run goes on to finish it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from orchestrator.cluster import Worker
from orchestrator.cluster import durable as durable_module
from orchestrator.cluster.durable import DurableRun
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.store.errors import StoreUnavailable
from orchestrator.store.runs import Claim, NewInboxItem, RunCommit, StoredEvent
from orchestrator.store.runs_sql import SQLRunStore, postgres_run_store
from tests.cluster import apps
from tests.pg import StoppableServer, end_connections
from tests.server.support import read_sse, serving

INPUT = {"role": "user", "content": "hello"}


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")
    return tmp_path / "marks"


@asynccontextmanager
async def web_node_and_worker(
    web_store: SQLRunStore, worker_store: SQLRunStore
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A web node on ``web_store``, a worker of ``apps.approval_agent`` on ``worker_store``: a client and the URL."""
    worker = Worker(await apps.approval_agent(), worker_store, name="a", poll_seconds=0.05, lease_seconds=3.0)
    async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=10) as http:
        await nursery.start(worker.run)
        async with serving(StoreBackend(web_store, poll_seconds=0.02)) as base:  # type: ignore[arg-type]
            yield http, base
        nursery.cancel_scope.cancel()


def test_the_call_a_cut_connection_breaks_is_store_unavailable_and_the_next_connects_again(
    pg_store: SQLRunStore, postgres_dsn: str
) -> None:
    pg_store.create_run("s1", "r1", INPUT)
    pg_store.wait_for_work(0.01)  # opens the listening connection too
    assert end_connections(postgres_dsn) == 2
    with pytest.raises(StoreUnavailable, match="connection was lost"):
        pg_store.run("r1")
    record = pg_store.run("r1")
    assert record is not None and record.status == "queued"
    with pytest.raises(StoreUnavailable, match="waiting for work"):
        pg_store.wait_for_work(0.01)
    pg_store.create_run("s2", "r2", INPUT)
    pg_store.wait_for_work(0.01)  # listening again: no error
    assert [r.request_id for r in pg_store.runs()] == ["r1", "r2"]


async def test_a_parked_run_is_answered_and_finished_after_every_connection_was_cut(postgres_dsn: str) -> None:
    web_store, worker_store = postgres_run_store(postgres_dsn), postgres_run_store(postgres_dsn)
    answers: list[int] = []
    try:
        with trio.fail_after(60):
            async with web_node_and_worker(web_store, worker_store) as (http, base):
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "paint"})
                assert started.status_code == 202, started.text
                request_id = started.json()["request_id"]

                async def answer(event: dict[str, Any]) -> None:
                    if event["type"] != "run_parked":
                        return
                    assert await trio.to_thread.run_sync(end_connections, postgres_dsn) >= 2
                    payload = {"tool_call_id": event["waiting"][0], "answer": "yes"}
                    while True:  # a client retries a 503 with the same key
                        posted = await http.post(
                            f"{base}/sessions/s1/events",
                            json={"name": "ask_user_response", "payload": payload},
                            headers={"Idempotency-Key": "answer-1"},
                        )
                        answers.append(posted.status_code)
                        if posted.status_code != 503:
                            break
                        assert posted.json()["error"]["type"] == "StoreUnavailable"
                        assert posted.headers["retry-after"] == "1"
                        await trio.sleep(0.05)

                got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=answer)
    finally:
        web_store.close()
        worker_store.close()
    assert answers[-1] == 202 and set(answers) <= {202, 503}, answers
    assert got.types[-1] == "run_completed", got.types
    assert got.events[-1]["result"]["content"] == "Done with paint: yes."
    seqs = [e["seq"] for e in got.events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert (apps.MARKS / "record.log").read_text().splitlines() == ["paint"]


async def test_an_answer_whose_insert_loses_the_connection_is_a_503_and_its_retry_is_taken_once(
    postgres_dsn: str,
) -> None:
    web_store = postgres_run_store(postgres_dsn)
    web_store.create_run("s1", "r1", INPUT)
    waiting = {"tool_call_id": "q1", "event": "ask_user", "payload": {}, "response_event": "ask_user_response"}
    lease = web_store.claim("worker", 30.0)[0]
    web_store.commit(lease, RunCommit(checkpoint={"version": 1, "states": {}, "waiting": [waiting]}, status="parked"))
    post = web_store.post
    cuts = 0

    def post_after_a_cut(item: NewInboxItem, check: Any = None) -> Any:
        nonlocal cuts
        if cuts == 0:  # the connection breaks between finding the run and inserting the answer
            cuts += end_connections(postgres_dsn)
        return post(item, check)

    web_store.post = post_after_a_cut  # type: ignore[method-assign]
    answer = {"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "yes"}}
    try:
        with trio.fail_after(30):
            async with (
                httpx.AsyncClient(timeout=10) as http,
                serving(StoreBackend(web_store, poll_seconds=0.02)) as base,  # type: ignore[arg-type]
            ):
                key = {"Idempotency-Key": "answer-1"}
                first = await http.post(f"{base}/sessions/s1/events", json=answer, headers=key)
                again = await http.post(f"{base}/sessions/s1/events", json=answer, headers=key)
    finally:
        web_store.close()
    assert cuts >= 1
    assert (first.status_code, first.json()["error"]["type"]) == (503, "StoreUnavailable"), first.text
    assert again.status_code == 202, again.text
    check = postgres_run_store(postgres_dsn)
    try:
        assert [(i.name, i.idempotency_key) for i in check.inbox("r1")] == [("ask_user_response", "answer-1")]
    finally:
        check.close()


async def test_a_resumed_run_that_cannot_read_its_inbox_parks_again_and_finishes_with_the_answer(
    postgres_dsn: str,
) -> None:
    web_store, worker_store = postgres_run_store(postgres_dsn), postgres_run_store(postgres_dsn)
    inbox = worker_store.inbox
    cuts = 0

    def inbox_after_a_cut(request_id: str, *, after_id: int | None = None) -> Any:
        nonlocal cuts
        if after_id is None:  # the resumed call looking for its answer (the inbox poll gives after_id)
            if not cuts and inbox(request_id):
                cuts += end_connections(postgres_dsn)
                # The read at the cut fails, whether or not the pool could have reached a fresh connection.
                raise StoreUnavailable(f"{postgres_dsn}: the connection was cut")
            return inbox(request_id)
        if not cuts:
            return []  # the poll has not seen the answer before the resumed call looked for it
        return inbox(request_id, after_id=after_id)

    claim_runs = worker_store.claim_runs

    def claim_without_inboxes(*args: Any, **kwargs: Any) -> Claim:
        # As a store whose claim does not read the inboxes: the resumed call reads its own.
        claim = claim_runs(*args, **kwargs)
        return attrs.evolve(claim, runs=tuple(attrs.evolve(run, inbox=None) for run in claim.runs))

    worker_store.inbox = inbox_after_a_cut  # type: ignore[method-assign]
    worker_store.claim_runs = claim_without_inboxes  # type: ignore[method-assign]
    try:
        with trio.fail_after(60):
            async with web_node_and_worker(web_store, worker_store) as (http, base):
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "paint"})
                request_id = started.json()["request_id"]

                async def answer(event: dict[str, Any]) -> None:
                    if event["type"] == "run_parked" and not cuts:
                        payload = {"tool_call_id": event["waiting"][0], "answer": "yes"}
                        posted = await http.post(
                            f"{base}/sessions/s1/events", json={"name": "ask_user_response", "payload": payload}
                        )
                        assert posted.status_code == 202, posted.text

                got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=answer)
    finally:
        web_store.close()
        worker_store.close()
    assert cuts >= 1
    assert got.types[-1] == "run_completed", got.types
    assert got.types.count("run_parked") == 2, got.types
    assert got.events[-1]["result"]["content"] == "Done with paint: yes."


async def test_a_parked_run_waits_out_its_database_going_away_and_finishes_when_it_is_back(
    stoppable_postgres: StoppableServer,
) -> None:
    dsn = stoppable_postgres.dsn()
    web_store, worker_store = postgres_run_store(dsn), postgres_run_store(dsn)
    during: list[httpx.Response] = []
    answers: list[int] = []
    try:
        with trio.fail_after(90):
            async with web_node_and_worker(web_store, worker_store) as (http, base):
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "paint"})
                request_id = started.json()["request_id"]
                events = f"{base}/runs/{request_id}/events"
                parked = await read_sse(http, events, stop=lambda e: e["type"] == "run_parked")
                payload = {"tool_call_id": parked.events[-1]["waiting"][0], "answer": "yes"}
                answer = {"name": "ask_user_response", "payload": payload}

                await trio.to_thread.run_sync(stoppable_postgres.stop)
                during.append(await http.post(f"{base}/sessions/s1/events", json=answer))
                during.append(await http.get(f"{base}/runs/{request_id}"))
                await trio.sleep(1.0)  # the worker keeps asking for work meanwhile
                await trio.to_thread.run_sync(stoppable_postgres.start)

                while not answers or answers[-1] == 503:  # a client retries a 503
                    posted = await http.post(f"{base}/sessions/s1/events", json=answer)
                    answers.append(posted.status_code)
                    await trio.sleep(0.05)
                rest = await read_sse(http, events, last_event_id=parked.events[-1]["seq"])
    finally:
        web_store.close()
        worker_store.close()
    assert [(r.status_code, r.json()["error"]["type"]) for r in during] == [(503, "StoreUnavailable")] * 2
    assert answers[-1] == 202, answers
    assert rest.types[-1] == "run_completed", rest.types
    assert rest.events[-1]["result"]["content"] == "Done with paint: yes."
    seqs = [e["seq"] for e in [*parked.events, *rest.events]]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_a_commit_the_store_cannot_take_after_its_retries_stops_the_run_without_failing_it(
    stoppable_postgres: StoppableServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable_module, "COMMIT_RETRY_SECONDS", (0.01, 0.01))
    store = postgres_run_store(stoppable_postgres.dsn())
    try:
        store.create_run("s1", "r1", INPUT)
        lease = store.claim("worker", 30.0)[0]
        durable = DurableRun(store, lease, lambda event, config: False)
        durable.events.append(StoredEvent("r1", 1, "text_delta", {"type": "text_delta", "seq": 1}))
        await trio.to_thread.run_sync(stoppable_postgres.stop)
        await durable.commit()  # tried three times, then the run stops: no error reaches the run
        assert durable.lost and durable.scope.cancel_called
        await trio.to_thread.run_sync(stoppable_postgres.start)
        await durable.commit("failed")  # a lost run writes nothing more
        record = store.run("r1")
    finally:
        store.close()
    assert record is not None and (record.status, record.last_seq) == ("running", 0)
    assert record.lease_owner == "worker"

"""Two web nodes answering the same question at the same moment, on PostgreSQL: one answer is taken.

Each of 40 runs parks on its question; the answer is then posted to both web nodes at once. With
one Idempotency-Key (a client retrying on another node), the store settles the race itself: one
inbox item, and both posts get the accepted answer (the second as a duplicate) instead of a 500
from the unique key. Without a key, the second post is refused (409, with the reason) as a
single process refuses a second answer, instead of being accepted and dropped later. Either way
every question is answered exactly once and every run completes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import psycopg
import pytest
import trio

from orchestrator.store.runs import AnswerWaiting, InboxRefused, NewInboxItem, RunCommit, RunRecord, RunStore
from orchestrator.store.runs_sql import postgres_run_store
from tests.cluster.processes import Cluster
from tests.server.support import SSE, read_sse

RUNS = 40


@pytest.fixture
def cluster(postgres_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(postgres_dsn, tmp_path, tmp_path / "marks") as running:
        yield running


async def test_an_answer_raced_through_two_web_nodes_is_taken_once(cluster: Cluster) -> None:
    for name in ("worker-a", "worker-b"):
        cluster.worker(name, lease_seconds=5)
    urls = [cluster.web("web-a").url, cluster.web("web-b").url]
    answers: dict[int, list[httpx.Response]] = {}
    streams: dict[int, SSE] = {}
    histories: dict[int, list[dict[str, Any]]] = {}
    try:
        with trio.fail_after(120):
            async with httpx.AsyncClient(timeout=30) as http, trio.open_nursery() as nursery:

                async def one(index: int) -> None:
                    session_id = f"s{index}"
                    base = urls[index % 2]
                    started = await http.post(f"{base}/sessions/{session_id}/runs", json={"input": f"job {index}"})
                    assert started.status_code == 202, started.text
                    request_id = started.json()["request_id"]
                    headers = {"Idempotency-Key": f"answer-{index}"} if index % 2 == 0 else {}

                    async def race(event: dict[str, Any]) -> None:
                        if event["type"] != "run_parked":
                            return
                        answer = {
                            "name": "ask_user_response",
                            "payload": {"tool_call_id": event["waiting"][0], "answer": "yes"},
                        }
                        got: list[httpx.Response] = []

                        async def post(node: str) -> None:
                            url = f"{node}/sessions/{session_id}/events"
                            got.append(await http.post(url, json=answer, headers=headers))

                        async with trio.open_nursery() as both:
                            for node in urls:
                                both.start_soon(post, node)
                        answers[index] = got

                    streams[index] = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=race)
                    histories[index] = (await http.get(f"{urls[1 - index % 2]}/sessions/{session_id}")).json()[
                        "messages"
                    ]

                for index in range(RUNS):
                    nursery.start_soon(one, index)
    except BaseException:
        print(cluster.logs())
        raise
    server_errors = [
        f"run {index}: {response.status_code} {response.text[:200]!r}"
        for index in range(RUNS)
        for response in answers[index]
        if response.status_code >= 500
    ]
    assert not server_errors, "\n".join(server_errors)
    for index in range(RUNS):
        got = answers[index]
        statuses = sorted(response.status_code for response in got)
        texts = [response.text[:200] for response in got]
        refusals = [response.json()["error"] for response in got if response.status_code != 202]
        assert all(error["type"] == "EventRefused" for error in refusals), (index, texts)
        if index % 2 == 0:
            # The same key: the second gets the winner's item back, or (the run already went on) a refusal.
            assert statuses in ([202, 202], [202, 409]), (index, statuses, texts)
        else:
            assert statuses == [202, 409], (index, statuses, texts)
        assert streams[index].types[-1] == "run_completed", streams[index].types[-6:]
        assert streams[index].events[-1]["result"]["content"] == f"Done with job {index}: yes."
        ask_results = [m["content"] for m in histories[index] if m["role"] == "tool" and m["name"] == "ask_user"]
        assert ask_results == ["yes"], (index, ask_results)
    per_run = cluster.query(
        "SELECT r.session_id, count(i.id), sum(i.consumed) FROM orchestrator_runs r"
        " JOIN orchestrator_inbox i ON i.request_id = r.request_id GROUP BY r.session_id"
    )
    assert sorted(per_run) == sorted((f"s{index}", 1, 1) for index in range(RUNS)), per_run
    statuses = cluster.query("SELECT status, count(*) FROM orchestrator_runs GROUP BY status")
    assert statuses == [("completed", RUNS)], statuses


def _post_in_thread(store: Any, item: Any) -> tuple[threading.Thread, list[Any]]:
    """``store.post(item)`` in a thread of its own; its outcome (a result or an exception) lands in the list."""
    outcome: list[Any] = []

    def post() -> None:
        try:
            outcome.append(store.post(item))
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=post)
    thread.start()
    return thread, outcome


def _wait_for_a_lock_wait(dsn: str) -> None:
    """Until a session of ``dsn``'s database waits for a lock another holds (the post is blocked)."""
    deadline = time.monotonic() + 10
    with psycopg.connect(dsn, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if waiting and waiting[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the post never waited for the lock")


INBOX_INSERT = (
    "INSERT INTO orchestrator_inbox (session_id, request_id, name, payload, idempotency_key, consumed, created)"
    " VALUES (%s, %s, 'ask_user_response', '{\"answer\": \"first\"}', %s, 0, 0) RETURNING id"
)


def test_a_key_inserted_by_a_concurrent_transaction_gives_the_winners_item(postgres_dsn: str) -> None:
    """Another node's transaction inserts the key while this post is under way: no UniqueViolation, the winner's item.

    The other node holds the run's row (as its post does) and commits its item while this post waits."""
    store = postgres_run_store(postgres_dsn)
    try:
        store.create_run("s1", "r1", {"role": "user", "content": "one"})
        with psycopg.connect(postgres_dsn) as other:
            other.execute("SELECT 1 FROM orchestrator_runs WHERE request_id = 'r1' FOR UPDATE")
            row = other.execute(INBOX_INSERT, ("s1", "r1", "answer-1")).fetchone()
            assert row is not None
            posted = NewInboxItem("s1", "r1", "ask_user_response", {"answer": "first"}, "answer-1")
            thread, outcome = _post_in_thread(store, posted)
            _wait_for_a_lock_wait(postgres_dsn)
            other.commit()
        thread.join(10)
        [result] = outcome
        assert not isinstance(result, Exception), repr(result)
        item, created = result
        assert (created, item.id, item.request_id, dict(item.payload)) == (False, row[0], "r1", {"answer": "first"})
        assert store.inbox("r1") == [item]
    finally:
        store.close()


def test_a_key_another_session_holds_uncommitted_does_not_hold_up_a_post(postgres_dsn: str) -> None:
    """Keys belong to their session: another session's transaction with the same key neither blocks nor wins."""
    store = postgres_run_store(postgres_dsn)
    try:
        store.create_run("s1", "r1", {"role": "user", "content": "one"})
        store.create_run("s2", "r2", {"role": "user", "content": "two"})
        with psycopg.connect(postgres_dsn) as other:
            other.execute("SELECT 1 FROM orchestrator_runs WHERE request_id = 'r2' FOR UPDATE")
            assert other.execute(INBOX_INSERT, ("s2", "r2", "answer-1")).fetchone() is not None
            item, created = store.post(NewInboxItem("s1", "r1", "ask_user_response", {"answer": "b"}, "answer-1"))
            other.commit()
        assert (created, item.request_id, dict(item.payload)) == (True, "r1", {"answer": "b"})
        assert store.inbox("r1") == [item]
    finally:
        store.close()


def test_a_call_takes_one_answer_and_the_check_sees_the_run_as_it_is_in_the_transaction(store: RunStore) -> None:
    store.create_run("s1", "r1", {"role": "user", "content": "one"})
    answer = NewInboxItem("s1", "r1", "ask_user_response", {"tool_call_id": "q1", "answer": "yes"})
    seen: list[str] = []

    def check(run: RunRecord) -> str | None:
        seen.append(run.status)
        return None

    first, created = store.post(answer, check)
    assert created and seen == ["queued"]
    with pytest.raises(AnswerWaiting) as second:
        store.post(attrs.evolve(answer, payload={"tool_call_id": "q1", "answer": "no"}))
    assert (second.value.request_id, second.value.tool_call_id) == ("r1", "q1")
    # A retry of a keyed answer gets the earlier item back; other calls and steering are not held up.
    keyed = attrs.evolve(answer, payload={"tool_call_id": "q2", "answer": "yes"}, idempotency_key="k2")
    item, created = store.post(keyed)
    assert (store.post(keyed), created) == ((item, False), True)
    store.post(NewInboxItem("s1", "r1", "steering", {"content": "also this"}))
    with pytest.raises(InboxRefused) as refused:
        store.post(attrs.evolve(answer, payload={"tool_call_id": "q3"}), lambda run: f"no waiting call in {run.status}")
    assert refused.value.reason == "no waiting call in queued"
    assert [i.payload.get("tool_call_id") for i in store.inbox("r1")] == ["q1", "q2", None]
    # Once the first answer is used up, the call may be answered again (a worker refused it for good).
    [lease] = store.claim("w1", 30)
    store.commit(lease, RunCommit(consumed=(first.id,)))
    _, created = store.post(attrs.evolve(answer, payload={"tool_call_id": "q1", "answer": "no"}))
    assert created

"""A retried answer (same Idempotency-Key, same body) that reaches a web node after its run took it and ended is
answered as the first post was, on any node, instead of refused as if no run had been there to take it."""

from __future__ import annotations

import httpx

from orchestrator.store.runs import NewInboxItem, RunCommit
from orchestrator.store.runs_sql import SQLRunStore
from tests.cluster.processes import Cluster

ANSWER = {"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "yes"}}


def answered_and_ended(store: SQLRunStore) -> None:
    """Run r1 of s1 took the answer posted with key ``answer-1`` and completed, as a worker leaves it."""
    store.create_run("s1", "r1", {"role": "user", "content": "ask me"})
    (lease,) = store.claim("w", 30.0)
    item, _ = store.post(NewInboxItem("s1", "r1", ANSWER["name"], ANSWER["payload"], "answer-1"))
    store.commit(lease, RunCommit(consumed=(item.id,), status="completed"))


def test_a_retried_answer_after_its_run_ended_is_taken_as_before(cluster: Cluster, cluster_store: SQLRunStore) -> None:
    store = cluster_store
    answered_and_ended(store)
    urls = [cluster.web("web-a").url, cluster.web("web-b").url]
    with httpx.Client(timeout=30) as http:
        for url in urls:
            retried = http.post(f"{url}/sessions/s1/events", json=ANSWER, headers={"Idempotency-Key": "answer-1"})
            assert retried.status_code == 202, retried.text
        other = {**ANSWER, "payload": {"tool_call_id": "q1", "answer": "no"}}
        reused = http.post(f"{urls[0]}/sessions/s1/events", json=other, headers={"Idempotency-Key": "answer-1"})
        assert reused.status_code == 422, reused.text
        assert reused.json()["error"]["type"] == "IdempotencyKeyReused"
        fresh = http.post(f"{urls[1]}/sessions/s1/events", json=ANSWER, headers={"Idempotency-Key": "answer-2"})
        unkeyed = http.post(f"{urls[1]}/sessions/s1/events", json=ANSWER)
    for refused in (fresh, unkeyed):
        assert refused.status_code == 409, refused.text
        assert "no running request in session 's1'" in refused.json()["error"]["message"]
    assert [(i.request_id, i.idempotency_key) for i in store.inbox("r1")] == []  # nothing new went in

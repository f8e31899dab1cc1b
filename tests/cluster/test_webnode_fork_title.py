"""POST /sessions/{id}/fork and PUT /sessions/{id}/title on a web node (``serve --db``), over SQLite and PostgreSQL.

The sessions are written into the run store as a worker would write them (runs that stored their messages and
completed); the web node is a process of its own, answered over a real socket.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from orchestrator.messages import AssistantMessage, Message, UserMessage
from orchestrator.store.runs import RunCommit
from orchestrator.store.runs_sql import SQLRunStore
from tests.cluster.processes import Cluster


@pytest.fixture
def store(cluster_store: SQLRunStore) -> SQLRunStore:
    """The run store of the cluster (SQLite, then PostgreSQL) the test runs its web nodes on."""
    return cluster_store


def finished(store: SQLRunStore, session_id: str, request_id: str, *messages: Message) -> None:
    """A run of ``session_id`` that stored ``messages`` and completed, as a worker leaves it."""
    store.create_run(session_id, request_id, {"role": "user", "content": "seeded"})
    for lease in store.claim("seeding", 30.0, limit=100):
        if lease.request_id == request_id:
            store.commit(lease, RunCommit(messages=messages, status="completed"))
        else:
            store.release(lease)  # another session's queued run stays queued


def seed(store: SQLRunStore) -> None:
    finished(store, "trip", "r1", UserMessage("plan a trip"), AssistantMessage("where to?"))
    finished(store, "trip", "r2", UserMessage("to the sea"), AssistantMessage("booked"))
    finished(store, "taken", "r3", UserMessage("mine"))
    store.create_run("busy", "r4", {"role": "user", "content": "queued, no worker"})


def texts(session: dict[str, Any]) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in session["messages"]]


def refusal(response: httpx.Response, status: int, kind: str) -> str:
    """The reason of a refusal with ``status`` and error type ``kind`` (asserted)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["type"] == kind, body
    message: str = body["error"]["message"]
    return message


def test_a_web_node_titles_its_sessions_and_sets_titles(cluster: Cluster, store: SQLRunStore) -> None:
    seed(store)
    base = cluster.web("web").url
    with httpx.Client(base_url=base, timeout=10) as http:
        listed = http.get("/sessions").json()["sessions"]
        assert {s["session_id"]: s["title"] for s in listed} == {"trip": "plan a trip", "taken": "mine", "busy": ""}

        put = http.put("/sessions/trip/title", json={"title": "Seaside"})
        assert (put.status_code, put.json()) == (200, {"session_id": "trip", "title": "Seaside"})
        assert http.put("/sessions/busy/title", json={"title": "Queued"}).status_code == 200  # a run, no message
        assert http.get("/sessions/trip").json()["title"] == "Seaside"
        listed = http.get("/sessions").json()["sessions"]
        assert {s["session_id"]: s["title"] for s in listed} == {"trip": "Seaside", "taken": "mine", "busy": "Queued"}

        assert refusal(http.put("/sessions/nobody/title", json={"title": "x"}), 404, "NotFound") == (
            "no session 'nobody'"
        )
        for bad in ({"title": 5}, {"title": None}, {}, {"title": "  "}, {"title": "x" * 201}, {"title": "a\x00b"}):
            assert "'title'" in refusal(http.put("/sessions/trip/title", json=bad), 400, "BadRequest"), bad
        assert "unknown fields" in refusal(
            http.put("/sessions/trip/title", json={"title": "x", "colour": "red"}), 400, "BadRequest"
        )
        assert http.put("/sessions/trip/title", json=["x"]).status_code == 400
        assert http.put("/sessions/trip/title", content=b"{", headers={"content-type": "application/json"}).json()[
            "error"
        ]["type"] == "BadRequest"

        # Deleting the session deletes its title: the id starts untitled when it is used again.
        assert http.delete("/sessions/trip").status_code == 200
        assert store.titles(["trip"]) == {}
        finished(store, "trip", "r5", UserMessage("again"))
        assert http.get("/sessions/trip").json()["title"] == "again"


def test_a_web_node_forks_sessions_as_one_process_does(cluster: Cluster, store: SQLRunStore) -> None:
    seed(store)
    store.set_title("trip", "Seaside")
    base = cluster.web("web").url
    with httpx.Client(base_url=base, timeout=10) as http:
        early = http.post("/sessions/trip/fork", json={"turn": 1, "session_id": "trip-first"})
        assert (early.status_code, early.json()) == (
            201,
            {"session_id": "trip-first", "forked_from": "trip", "messages": 2},
        ), early.text
        shown = http.get("/sessions/trip-first").json()
        assert texts(shown) == ["plan a trip", "where to?"] and shown["title"] == "Seaside (fork)"

        whole = http.post("/sessions/trip/fork", json={})
        assert whole.status_code == 201, whole.text
        new = whole.json()["session_id"]
        assert new.startswith("trip-fork-") and whole.json()["messages"] == 4
        assert texts(http.get(f"/sessions/{new}").json()) == texts(http.get("/sessions/trip").json())
        listed = [s["session_id"] for s in http.get("/sessions").json()["sessions"]]
        assert {"trip-first", new} <= set(listed)

        # A fork is a session like any other: a run starts in it.
        started = http.post("/sessions/trip-first/runs", json={"input": "to the mountains instead"})
        assert started.status_code == 202, started.text

        assert refusal(http.post("/sessions/nobody/fork", json={}), 404, "NotFound") == (
            "no stored session 'nobody' to fork"
        )
        assert refusal(http.post("/sessions/trip/fork", json={"session_id": "taken"}), 409, "SessionExists") == (
            "the session 'taken' exists already"
        )
        assert refusal(http.post("/sessions/busy/fork", json={}), 409, "SessionBusy") == (
            "session 'busy' already has a running request; fork it when the run has ended"
        )
        assert refusal(http.post("/sessions/trip/fork", json={"turn": 3}), 400, "BadRequest") == (
            "the session 'trip' has 2 turns; fork from turn 1 to 2"
        )
        for bad in ({"turn": "1"}, {"turn": True}, {"turn": 0}, {"turn": 1.5}, {"session_id": 5}, {"session_id": ""}):
            reason = refusal(http.post("/sessions/trip/fork", json=bad), 400, "BadRequest")
            assert "'turn'" in reason or "'session_id'" in reason, (bad, reason)
        assert "unknown fields" in refusal(http.post("/sessions/trip/fork", json={"turns": 1}), 400, "BadRequest")
        assert http.post("/sessions/trip/fork", json=[1]).status_code == 400
        # Nothing refused left a session behind.
        assert sorted(s["session_id"] for s in http.get("/sessions").json()["sessions"]) == sorted(
            ["trip", "taken", "busy", "trip-first", new]
        )

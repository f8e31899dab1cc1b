"""A uvicorn web node that carries runs with its lifespan off (``--lifespan off``) hands them back when it stops.

uvicorn runs no lifespan shutdown then, so the carrier the first request started drains at the process's signal,
before uvicorn's own handler gets it. SIGTERM while the node holds a run in its ``record`` call (held 3 s): the
call finishes, the run is no longer held (its row has no owner, though its lease lasts 60 s) and the process exits
as uvicorn does at SIGTERM, without a traceback. A Ctrl-C (SIGINT) during that drain hands the run back at once,
in the middle of its call, and a worker started next resumes it within 2 s. The ``record`` ledger shows each call
ran once.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import trio

from orchestrator.cluster.webnode import StoreBackend
from orchestrator.config import ExternalEvent
from orchestrator.store.runs_sql import SQLRunStore, sqlite_run_store
from tests.cluster.apps import LONG_LEASE_SECONDS
from tests.cluster.processes import APP, Cluster, Node
from tests.cluster.waits import until, until_final, until_parked

FACTORY = "tests.cluster.apps:long_lease_web_node"
CUT_OFF = "may or may not have taken effect"


def row(cluster: Cluster, session_id: str) -> tuple[str, str | None, str]:
    """The status, lease owner and request id of the session's run."""
    with sqlite3.connect(cluster.dsn.removeprefix("sqlite:///")) as db:
        ((status, owner, request_id),) = db.execute(
            "SELECT status, lease_owner, request_id FROM orchestrator_runs WHERE session_id = ?", (session_id,)
        ).fetchall()
    return str(status), None if owner is None else str(owner), str(request_id)


async def holding_a_slow_call(cluster: Cluster, session_id: str) -> Node:
    """A uvicorn web node without a lifespan whose carrier (its leases 60 s) holds a run in its 3 s ``record`` call."""
    web = cluster.uvicorn_web("web", app=APP, lifespan=False, factory=FACTORY)
    async with httpx.AsyncClient(timeout=30) as http:
        started = await http.post(f"{web.url}/sessions/{session_id}/runs", json={"input": "slow job"})
        assert started.status_code == 202, started.text
    until("the record call entered", lambda: cluster.records() == ["slow job"])
    status, owner, _ = row(cluster, session_id)
    assert status == "running" and owner is not None and f":{web.process.pid}:" in owner, (status, owner)
    return web


async def answered_and_completed(store: SQLRunStore, session_id: str, request_id: str, question: str) -> None:
    """Answer "yes" to the run's ``question`` through the store; the worker that carries it completes it."""
    with trio.fail_after(30):
        answer = ExternalEvent("ask_user_response", {"tool_call_id": question, "answer": "yes"})
        assert await StoreBackend(store).deliver(session_id, request_id, answer, None)
        assert await until_final(store, request_id) == "completed"


def exited_as_uvicorn_does(web: Node, signalled: int) -> None:
    """The node's process ended (by the signal it got, re-raised by uvicorn once it shut down), saying so."""
    code = web.process.wait(45)
    assert code in (0, -signalled), (code, web.output())
    assert "Finished server process" in web.output(), web.output()
    assert "Traceback" not in web.output(), web.output()


async def test_sigterm_lets_the_call_finish_and_leaves_the_run_held_by_nobody(sqlite_cluster: Cluster) -> None:
    cluster = sqlite_cluster
    with store_of(cluster) as store:
        web = await holding_a_slow_call(cluster, "drain")
        web.process.send_signal(signal.SIGTERM)
        exited_as_uvicorn_does(web, signal.SIGTERM)
        status, owner, request_id = row(cluster, "drain")
        assert owner is None, f"the run is still held by the stopped process ({status}, {owner})"
        assert status in ("parked", "queued"), status
        done = [e.body["result"]["content"] for e in store.events(request_id) if e.type == "tool_completed"]
        assert "recorded slow job" in done, done  # the step running at the signal finished
        # A worker (its own lease 60 s) finishes the run once its question is answered.
        cluster.worker("next", lease_seconds=LONG_LEASE_SECONDS)
        with trio.fail_after(30):
            question = await until_parked(store, request_id)
        await answered_and_completed(store, "drain", request_id, question)
    assert cluster.records() == ["slow job"]


async def test_ctrl_c_during_the_drain_hands_the_run_back_at_once_and_a_worker_resumes_it(
    sqlite_cluster: Cluster,
) -> None:
    cluster = sqlite_cluster
    with store_of(cluster) as store:
        web = await holding_a_slow_call(cluster, "hurry")
        web.process.send_signal(signal.SIGTERM)
        until("the carrier drains", lambda: "the run carrier drains" in web.output(), 10.0)
        web.process.send_signal(signal.SIGINT)
        exited_as_uvicorn_does(web, signal.SIGTERM)
        status, owner, request_id = row(cluster, "hurry")
        assert owner is None, f"the run is still held by the stopped process ({status}, {owner})"
        named = cluster.worker("next", lease_seconds=LONG_LEASE_SECONDS)  # named: it takes over no lease
        ready = time.monotonic()
        with trio.fail_after(30):
            question = await until_parked(store, request_id)
        assert time.monotonic() - ready < 2.0, "the run waited before it was resumed"
        resumed = [e.body["worker"] for e in store.events(request_id) if e.type == "run_resumed"]
        assert resumed[-1] == named.name, resumed
        failed = [e.body["result"]["content"] for e in store.events(request_id) if e.type == "tool_failed"]
        assert failed and CUT_OFF in failed[-1], failed  # cut off at the signal: not run again
        await answered_and_completed(store, "hurry", request_id, question)
    assert cluster.records() == ["slow job"]


@contextmanager
def store_of(cluster: Cluster) -> Iterator[SQLRunStore]:
    """The cluster's run store, open for the block; the processes' output is printed when the block fails."""
    store = sqlite_run_store(cluster.dsn.removeprefix("sqlite:///"))
    try:
        yield store
    except BaseException:
        print("\n".join(f"--- {node.name}\n{node.output()[-3000:]}" for node in cluster.nodes))
        raise
    finally:
        store.close()

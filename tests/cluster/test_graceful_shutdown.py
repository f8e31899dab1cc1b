"""SIGTERM drains a worker: the step running finishes, the run goes back at its last commit with its lease
ended at once, the other worker resumes it without waiting for the lease, no call runs twice, exit 0.

Two real ``python -m orchestrator worker`` processes on a throwaway PostgreSQL server; the ``record``
tool writes one line per call that ran (the ledger), and the run's stored events say who resumed it.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.messages import UserMessage
from orchestrator.store.runs_sql import postgres_run_store
from orchestrator.wire.format import encode_message
from tests.cluster.processes import Cluster, Node
from tests.cluster.waits import until

LEASE = 15.0
"""Long enough that a resume within 2 s can only come from the hand-back, not from the lease expiring."""


@pytest.fixture
def cluster(postgres_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(postgres_dsn, tmp_path, tmp_path / "marks") as running:
        yield running


def start_slow_run(cluster: Cluster, session_id: str) -> tuple[Node, Node]:
    """Both workers ready, a run whose ``record`` call holds 3 s, entered by one of them: (holder, other)."""
    workers = [cluster.worker(name, lease_seconds=LEASE) for name in ("worker-a", "worker-b")]
    store = postgres_run_store(cluster.dsn)
    try:
        store.create_run(session_id, f"run-{session_id}", encode_message(UserMessage("slow job")))
    finally:
        store.close()
    until("the record call entered", lambda: cluster.records() == ["slow job"])
    (owner,) = cluster.query("SELECT lease_owner FROM orchestrator_runs WHERE session_id = %s", session_id)[0]
    holder = next(node for node in workers if node.name == owner)
    return holder, next(node for node in workers if node is not holder)


def events(cluster: Cluster, session_id: str) -> list[tuple[int, str, dict[str, object], float]]:
    rows = cluster.query(
        "SELECT seq, type, body, created FROM orchestrator_run_events WHERE request_id = %s ORDER BY seq",
        f"run-{session_id}",
    )
    return [(int(seq), str(kind), json.loads(str(body)), float(created)) for seq, kind, body, created in rows]  # type: ignore[arg-type]


def tool_results(cluster: Cluster, session_id: str) -> list[dict[str, object]]:
    rows = cluster.query(
        "SELECT body FROM orchestrator_messages WHERE session_id = %s ORDER BY position", session_id
    )
    messages = [json.loads(str(body)) for (body,) in rows]
    return [m for m in messages if m["role"] == "tool"]


def test_sigterm_during_a_slow_tool_hands_the_run_to_the_other_worker_at_once(cluster: Cluster) -> None:
    holder, other = start_slow_run(cluster, "drain")
    try:
        holder.process.send_signal(signal.SIGTERM)
        assert holder.process.wait(30) == 0, holder.output()
        assert "drained after SIGTERM" in holder.output()
        until("the run parked at its question", lambda: cluster.query(
            "SELECT 1 FROM orchestrator_runs WHERE session_id = 'drain' AND status = 'parked'"
        ))
        log = events(cluster, "drain")
        resumed = [index for index, event in enumerate(log) if event[1] == "run_resumed"]
        assert len(resumed) == 1, [event[1] for event in log]
        assert log[resumed[0]][2]["worker"] == other.name
        resumed_at = log[resumed[0]][3]
        # The holder's last commit (the slow call's result); the resuming worker's first commit holds run_resumed.
        handed_back_at = max(event[3] for event in log[: resumed[0]] if event[3] < resumed_at)
        assert resumed_at - handed_back_at < 2.0, [(event[0], event[1], event[3]) for event in log]
        # Every call entered before the drain ran once, in the holder, and none in the other worker.
        assert [event[2]["worker"] for event in log if event[1] == "run_resumed"] == [other.name]
        started = [e for e in log if e[1] == "tool_started"]
        assert all(e[3] < handed_back_at or e[2]["call"]["name"] == "ask_user" for e in started), started
        # The call that was running finished in the holder and ran once; its result is in the history.
        assert cluster.records() == ["slow job"]
        records = [m for m in tool_results(cluster, "drain") if m["name"] == "record"]
        assert [m["content"] for m in records] == ["recorded slow job"], records
        assert other.process.poll() is None
    except AssertionError:
        print(cluster.logs())
        raise


def test_a_second_signal_hands_back_at_once_and_the_cut_off_call_is_not_run_again(cluster: Cluster) -> None:
    holder, other = start_slow_run(cluster, "hurry")
    try:
        holder.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        holder.process.send_signal(signal.SIGINT)
        hurried_at = time.time()
        assert holder.process.wait(30) == 0, holder.output()
        until("the run parked at its question", lambda: cluster.query(
            "SELECT 1 FROM orchestrator_runs WHERE session_id = 'hurry' AND status = 'parked'"
        ))
        log = events(cluster, "hurry")
        assert [event[2]["worker"] for event in log if event[1] == "run_resumed"] == [other.name]
        # Handed back at once: resumed while the cut-off call's thread (3 s) still ran in the holder.
        resumed_at = next(event[3] for event in log if event[1] == "run_resumed")
        assert resumed_at - hurried_at < 2.0, (resumed_at - hurried_at, holder.output())
        assert cluster.records() == ["slow job"]
        records = [m for m in tool_results(cluster, "hurry") if m["name"] == "record"]
        assert len(records) == 1 and "may or may not have taken effect" in str(records[0]["content"]), records
    except AssertionError:
        print(cluster.logs())
        raise

"""A carrier that starts on an SQLite run store takes over at once the runs of this machine's killed carriers.

Two ``worker`` processes (default names, ``host:pid:random``; leases of 60 s) each hold a run in the middle of
its approved ``charge`` call; one is killed with SIGKILL (reaped at once, or left a zombie its parent has not
reaped yet, as under a slow supervisor). A new ``worker`` started on the file ends the dead one's lease and its
run is resumed within 10 s, not after the 60 s lease; the live worker's lease is left alone (same owner, same
expiry) and it finishes its own run. The tool's ledger shows each approved charge ran once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from orchestrator.cluster.webnode import StoreBackend
from orchestrator.config import ExternalEvent
from orchestrator.store.runs_sql import SQLRunStore, sqlite_run_store
from tests.cluster.processes import Cluster
from tests.cluster.waits import until
from tests.reliability import durable_apps

APP = "tests.reliability.durable_apps:charge_agent"
LEASE = 60.0
"""Far longer than the bound: a run resumed within RESUMED_WITHIN was taken over, not left to its lease."""
RESUMED_WITHIN = 10.0


async def approved_and_charging(store: SQLRunStore, ledger: Path, session_id: str, order: str) -> str:
    """Start a run of ``order``, approve its charge once it waits, and return its request id once the charge's
    body has run (its ledger line is written; the call holds on)."""
    request_id = f"run-{session_id}"
    store.create_run(session_id, request_id, {"role": "user", "content": order})
    until(f"{order} waits for its approval", lambda: (r := store.run(request_id)) is not None and r.status == "parked")
    approval = ExternalEvent("tool_approval_response", {"tool_call_id": "c1", "approved": True})
    delivered = await StoreBackend(store).deliver(session_id, request_id, approval, None)
    assert delivered, delivered.reason
    until(f"{order} is charging", lambda: order in ledger_lines(ledger))
    return request_id


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def resumed_by(store: SQLRunStore, request_id: str) -> list[int]:
    """The pid of the worker of each ``run_resumed`` event of the run (named ``host:pid:random``)."""
    return [int(e.body["worker"].split(":")[-2]) for e in store.events(request_id) if e.type == "run_resumed"]


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
async def test_a_new_worker_takes_over_the_runs_of_a_killed_one_and_leaves_a_live_ones_alone(
    sqlite_cluster: Cluster, reaped: bool
) -> None:
    cluster = sqlite_cluster
    store = sqlite_run_store(cluster.dsn.removeprefix("sqlite:///"))
    ledger = cluster.marks / durable_apps.LEDGER.name
    try:
        killed = cluster.worker("killed", lease_seconds=LEASE, app=APP, capacity=1, named=False)
        orphan = await approved_and_charging(store, ledger, "orphan", "slow orphan")
        live = cluster.worker("live", lease_seconds=LEASE, app=APP, capacity=1, named=False)
        kept = await approved_and_charging(store, ledger, "kept", "long kept")
        before = store.run(kept)
        assert before is not None and before.lease_owner and f":{live.process.pid}:" in before.lease_owner

        os.kill(killed.process.pid, signal.SIGKILL)
        if reaped:
            killed.process.wait(10)
        else:
            until("the killed worker is a zombie", lambda: _state(killed.process.pid) == "Z")
        new = cluster.worker("new", lease_seconds=LEASE, app=APP, capacity=1, named=False)
        ready = time.monotonic()
        # The live worker's lease is as it was: not ended, nor taken by the new worker.
        after = store.run(kept)
        assert after is not None and after.status == "running", after
        assert (after.lease_owner, after.lease_expires) == (before.lease_owner, before.lease_expires)

        until("the killed worker's run completed", lambda: (r := store.run(orphan)) is not None and r.final, 30.0)
        taken = time.monotonic() - ready
        # The new worker (its one slot free) or the live one, once its charge ended, resumed the run.
        taker = resumed_by(store, orphan)[-1]
        assert taker in (new.process.pid, live.process.pid), taker
        assert taken < RESUMED_WITHIN, f"resumed {taken:.1f} s after the new worker started: it waited for the lease"
        until("the live worker's run completed", lambda: (r := store.run(kept)) is not None and r.final, 30.0)
        record = store.run(orphan)
        assert record is not None and record.status == "completed", record
        assert resumed_by(store, orphan) == [killed.process.pid, taker], "not resumed once more, after the kill"
        assert resumed_by(store, kept) == [live.process.pid], "the live worker's run was taken from it"
        results = [e.body["result"]["content"] for e in store.events(orphan) if e.type == "tool_failed"]
        assert results and "may or may not have taken effect" in results[-1], results
    except BaseException:
        print("\n".join(f"--- {node.name}\n{node.output()[-3000:]}" for node in cluster.nodes))
        raise
    finally:
        store.close()
    assert sorted(ledger_lines(ledger)) == ["long kept", "slow orphan"], "an approved charge ran twice"


def _state(pid: int) -> str:
    """The process's state letter in /proc (R, S, Z ...), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""

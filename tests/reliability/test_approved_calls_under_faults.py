"""An approved call runs at most once under faults, counted from the ledger the tool itself writes.

Worker processes on PostgreSQL carry runs whose one call, ``charge``, needs a person's approval
and is not idempotent; each real execution writes a ledger line. Two faults:

- kill -9: 30 runs and 30 kills of the two workers, each replaced by a new process;
- the database stopped for 4 s and started again while 10 charges run.

Every run ends completed; every charge ran at most once; a run whose charge was cut off says it
may or may not have taken effect, and one whose charge finished names its result.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.cluster.processes import Cluster, Node
from tests.pg import StoppableServer
from tests.reliability import durable_apps

APP = "tests.reliability.durable_apps:charge_agent"
LEASE = 2.0
CUT_OFF = "may or may not have taken effect"


class Approver:
    """Approves each parked run's waiting charge through the web node, once per park, until told to stop."""

    def __init__(self, cluster: Cluster, web: Node, http: httpx.AsyncClient) -> None:
        self.cluster = cluster
        self.web = web
        self.http = http
        self.answered: set[tuple[str, int]] = set()

    def _parked(self) -> list[tuple[str, int]]:
        rows = self.cluster.query("SELECT session_id, version FROM orchestrator_runs WHERE status = 'parked'")
        return [(str(session), int(version)) for session, version in rows]  # type: ignore[call-overload]

    async def run(self) -> None:
        while True:
            try:
                parked = await trio.to_thread.run_sync(self._parked)
            except Exception:  # the database is away: ask again
                parked = []
            for session, version in parked:
                if (session, version) in self.answered:
                    continue
                try:
                    reply = await self.http.post(
                        f"{self.web.url}/sessions/{session}/events",
                        json={"name": "tool_approval_response", "payload": {"tool_call_id": "c1", "approved": True}},
                    )
                except httpx.HTTPError:
                    continue
                if reply.status_code in (202, 409):  # 409: an answer already waits, or the call no longer waits
                    self.answered.add((session, version))
            await trio.sleep(0.05)


def _final(cluster: Cluster) -> dict[str, str]:
    return {str(s): str(status) for s, status in cluster.query("SELECT session_id, status FROM orchestrator_runs")}


async def _until_all_final(cluster: Cluster, count: int, seconds: float) -> None:
    with trio.fail_after(seconds):
        while True:
            try:
                statuses = await trio.to_thread.run_sync(_final, cluster)
            except Exception:
                statuses = {}
            if len(statuses) == count and all(s in ("completed", "failed", "cancelled") for s in statuses.values()):
                return
            await trio.sleep(0.2)


def _check(cluster: Cluster, ledger: Path, orders: list[str]) -> None:
    executed = Counter(ledger.read_text().splitlines() if ledger.exists() else [])
    twice = {order: n for order, n in executed.items() if n > 1}
    assert not twice, f"approved charges ran more than once: {twice}"
    assert set(executed) <= set(orders)
    assert set(_final(cluster).values()) == {"completed"}
    rows = cluster.query("SELECT session_id, body FROM orchestrator_messages WHERE role = 'tool' ORDER BY session_id")
    results: dict[str, list[str]] = {}
    for session, body in rows:
        results.setdefault(str(session), []).append(str(body))
    for n, order in enumerate(orders):
        (result,) = results[f"s{n}"]
        if f"charged {order}" in result:
            assert executed[order] == 1, f"{order}: its result says charged but the ledger has no charge"
        else:
            assert CUT_OFF in result, f"{order}: {result}"


@pytest.fixture
def cluster(postgres_dsn: str, tmp_path: Path) -> Any:
    with Cluster(postgres_dsn, tmp_path, tmp_path / "marks") as running:
        yield running


async def test_thirty_kills_of_two_workers_run_no_approved_charge_twice(cluster: Cluster) -> None:
    ledger = cluster.marks / durable_apps.LEDGER.name
    chance = random.Random(26)
    web = cluster.web("web")
    workers = [cluster.worker(f"w{n}", app=APP, lease_seconds=LEASE) for n in range(2)]
    orders = [f"busy order-{n}" for n in range(30)]
    async with httpx.AsyncClient(timeout=10) as http, trio.open_nursery() as nursery:
        approver = Approver(cluster, web, http)
        nursery.start_soon(approver.run)
        try:
            for n, order in enumerate(orders):
                started = await http.post(f"{web.url}/sessions/s{n}/runs", json={"input": order})
                assert started.status_code == 202, started.text
                await trio.sleep(chance.uniform(0.3, 1.2))
                slot = n % 2
                workers[slot].kill()
                name = f"w{slot}-{n}"
                workers[slot] = await trio.to_thread.run_sync(
                    lambda name=name: cluster.worker(name, app=APP, lease_seconds=LEASE)  # type: ignore[misc]
                )
            await _until_all_final(cluster, len(orders), 90)
        except BaseException:
            print(cluster.logs())
            raise
        nursery.cancel_scope.cancel()
    _check(cluster, ledger, orders)


@pytest.fixture
def stoppable_cluster(stoppable_postgres: StoppableServer, tmp_path: Path) -> Any:
    with Cluster(stoppable_postgres.dsn(), tmp_path, tmp_path / "marks") as running:
        yield running


async def test_the_database_stopped_under_load_runs_no_approved_charge_twice(
    stoppable_cluster: Cluster, stoppable_postgres: StoppableServer
) -> None:
    cluster = stoppable_cluster
    ledger = cluster.marks / durable_apps.LEDGER.name
    web = cluster.web("web")
    for n in range(2):
        cluster.worker(f"w{n}", app=APP, lease_seconds=LEASE)
    orders = [f"busy order-{n}" for n in range(10)]
    async with httpx.AsyncClient(timeout=10) as http, trio.open_nursery() as nursery:
        approver = Approver(cluster, web, http)
        nursery.start_soon(approver.run)
        try:
            for n, order in enumerate(orders):
                started = await http.post(f"{web.url}/sessions/s{n}/runs", json={"input": order})
                assert started.status_code == 202, started.text
            with trio.fail_after(60):  # the charges are under way
                while not ledger.exists() or len(ledger.read_text().splitlines()) < 3:
                    await trio.sleep(0.02)
            await trio.to_thread.run_sync(stoppable_postgres.stop)
            await trio.sleep(4.0)
            await trio.to_thread.run_sync(stoppable_postgres.start)
            await _until_all_final(cluster, len(orders), 90)
        except BaseException:
            print(cluster.logs())
            raise
        nursery.cancel_scope.cancel()
    _check(cluster, ledger, orders)

"""A worker keeps the lease of every run it carries for as long as it carries it: runs that outlast their lease many
times over are never taken over by another worker watching the same store, and each call runs once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from orchestrator import ScriptedModel, UserMessage, create_agent, tool
from orchestrator.cluster import Worker
from orchestrator.store.runs_sql import sqlite_run_store
from orchestrator.wire.format import encode_message
from tests.cluster.painting import paint_then_report

LEASE_SECONDS = 0.6
WORK_SECONDS = 2.5  # past four leases


async def test_runs_that_outlast_their_lease_keep_it_while_carried(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    ran: list[str] = []

    @tool
    async def slow_paint(colour: str) -> str:
        """Paint, slowly.

        Args:
            colour: the colour
        """
        ran.append(colour)
        await trio.sleep(WORK_SECONDS)
        return f"painted {colour}"

    async def painter() -> Any:
        return await create_agent(ScriptedModel([paint_then_report], repeat_last=True), tools=[slow_paint])

    store = sqlite_run_store(path)
    watcher_store = sqlite_run_store(path)
    claimed_by_watcher: list[str] = []
    claim_runs = watcher_store.claim_runs

    def watched_claim(*args: Any, **kwargs: Any) -> Any:
        claim = claim_runs(*args, **kwargs)
        claimed_by_watcher.extend(claimed.lease.request_id for claimed in claim.runs)
        return claim

    watcher_store.claim_runs = watched_claim  # type: ignore[method-assign]
    request_ids = [f"r{index}" for index in range(3)]
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                carrier = Worker(await painter(), store, name="carrier", lease_seconds=LEASE_SECONDS, poll_seconds=0.05)
                await nursery.start(carrier.run)
                for index, request_id in enumerate(request_ids):
                    store.create_run(f"s{index}", request_id, encode_message(UserMessage("paint")))
                while len(ran) < len(request_ids):
                    await trio.sleep(0.02)
                # Another worker looks for work all along: a lease left to expire would be taken over.
                watcher = Worker(
                    await painter(), watcher_store, name="watcher", lease_seconds=LEASE_SECONDS, poll_seconds=0.05
                )
                await nursery.start(watcher.run)
                while any(store.run(request_id).status != "completed" for request_id in request_ids):  # type: ignore[union-attr]
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        assert sorted(ran) == ["red"] * len(request_ids)  # each call ran once
        assert claimed_by_watcher == []
        for request_id in request_ids:
            names = [event.type for event in store.events(request_id)]
            assert names.count("tool_completed") == 1 and names[-1] == "run_completed"
    finally:
        store.close()
        watcher_store.close()

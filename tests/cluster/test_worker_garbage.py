"""A run a worker carried leaves nothing behind: nothing for the cyclic garbage collector (its objects are freed as
soon as its carrier lets it go, so a busy worker's collector has no run graphs to scan and free), and no wait on
its inbox in the worker's wake-ups."""

from __future__ import annotations

import gc
import types

import trio

from bench.cluster_app import approval_agent
from orchestrator.cluster import Worker
from orchestrator.cluster.durable import DurableRun
from orchestrator.runtime.run import RequestRun
from orchestrator.store.runs_sql import SQLRunStore
from tests.cluster.answers import post_yes

RUNS = 3


async def _carry_until_ended(store: SQLRunStore) -> Worker:
    """Runs of the cluster workload's agent (a lookup, a question, an answer) that park on the question, are answered
    through their inbox, resume and complete."""
    worker = Worker(await approval_agent(), store, name="w1", poll_seconds=0.05)
    for n in range(RUNS):
        store.create_run(f"s{n}", f"r{n}", {"role": "user", "content": "go"})
    answered: set[str] = set()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while {record.status for record in store.runs()} != {"completed"}:
                for record in store.runs():
                    if record.status == "parked" and record.request_id not in answered and post_yes(store, record):
                        answered.add(record.request_id)
                await trio.sleep(0.02)
            while worker.active:
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    return worker


def _of_a_run(found: object) -> bool:
    """Whether ``found`` is a run's object: the run, its durable link, or a frame of the library's code (held by
    an exception's traceback)."""
    if isinstance(found, types.FrameType):
        return "/orchestrator/" in found.f_code.co_filename
    return isinstance(found, (RequestRun, DurableRun))


def _named(found: object) -> str:
    return f"frame of {found.f_code.co_qualname}" if isinstance(found, types.FrameType) else type(found).__name__


async def test_a_run_parked_answered_and_ended_leaves_no_reference_cycle(store: SQLRunStore) -> None:
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable is kept in gc.garbage to be looked at
    try:
        await _carry_until_ended(store)
        gc.collect()
        left = [_named(found) for found in gc.garbage if _of_a_run(found)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert {record.status for record in store.runs()} == {"completed"}
    assert left == []


async def test_a_worker_keeps_no_wait_on_the_inbox_of_a_run_it_let_go(store: SQLRunStore) -> None:
    worker = await _carry_until_ended(store)
    assert {record.status for record in store.runs()} == {"completed"}
    run_ids = {f"r{n}" for n in range(RUNS)}
    assert [key for key in worker.wakeups._waiting if key[1] in run_ids] == []

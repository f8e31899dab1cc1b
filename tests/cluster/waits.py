"""Waits the cluster tests use: on a run's row in the run store, and on any condition from a blocking test."""

from __future__ import annotations

import time

import trio

from orchestrator.cluster.checkpoint import read
from orchestrator.store.runs import RunStore


async def until_parked(store: RunStore, request_id: str) -> str:
    """The call the run waits on, once it is parked."""
    while True:
        record = store.run(request_id)
        assert record is not None
        checkpoint = read(record.checkpoint)
        if record.status == "parked" and checkpoint is not None and checkpoint.unanswered():
            return checkpoint.unanswered()[0].tool_call_id
        await trio.sleep(0.02)


async def until_final(store: RunStore, request_id: str) -> str:
    """The run's final status, once it has one."""
    while True:
        record = store.run(request_id)
        assert record is not None
        if record.final:
            return record.status
        await trio.sleep(0.02)


def until(what: str, check: object, seconds: float = 30.0) -> object:
    """``check()`` (or ``check``) once it is truthy, polled every 20 ms; AssertionError naming ``what`` after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check() if callable(check) else check
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"not within {seconds:g} s: {what}")

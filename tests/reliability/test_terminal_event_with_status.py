"""A carried run's terminal event reaches the store in the commit that ends the run, never in a flush before it.

A web node read a run's ``run_completed`` from its log while the run's row still said ``running`` (its view
``done: false``): the worker's periodic flush of streamed events had written the terminal event before the
commit that sets the final status, and a flush that had looked before the run offered it still wrote it when
it took the commit lock a moment later.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trio
import trio.testing

from orchestrator.cluster.durable import DurableRun
from orchestrator.events import RunCompletedEvent, TextDeltaEvent
from orchestrator.messages import AssistantMessage
from orchestrator.store.runs_sql import SQLRunStore, sqlite_run_store

IDS = {"session_id": "s1", "request_id": "r1", "ts": 0.0}
"""The fields every event of the run ``carried`` claims has but its own."""


@contextmanager
def carried(tmp_path: Path) -> Iterator[tuple[SQLRunStore, DurableRun]]:
    """A store in ``tmp_path`` holding one run (``r1`` of ``s1``), claimed, and the ``DurableRun`` that carries it."""
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        store.create_run("s1", "r1", {"role": "user", "content": "hi"})
        (lease,) = store.claim("w1", 30.0)
        yield store, DurableRun(store, lease, lambda event, config: False)
    finally:
        store.close()


async def test_a_flush_leaves_the_terminal_event_to_the_commit_that_ends_the_run(tmp_path: Path) -> None:
    with carried(tmp_path) as (store, durable):
        durable.offer(TextDeltaEvent(**IDS, seq=1, text="do"))
        await durable.flush()  # streamed text goes at once
        assert [e.type for e in store.events("r1")] == ["text_delta"]
        durable.offer(TextDeltaEvent(**IDS, seq=2, text="ne"))
        durable.offer(RunCompletedEvent(**IDS, seq=3, result=AssistantMessage("done")))
        await durable.flush()
        record = store.run("r1")
        assert record is not None and not record.final
        assert [e.type for e in store.events("r1")] == ["text_delta"]  # nothing that says it ended, yet
        await durable.commit("completed")
        record = store.run("r1")
        assert record is not None and record.final
        assert [e.type for e in store.events("r1")] == ["text_delta", "text_delta", "run_completed"]


async def test_a_flush_waiting_for_the_lock_leaves_the_terminal_event_offered_meanwhile(tmp_path: Path) -> None:
    """The flusher looks at what waits, then waits for the commit lock (a commit in flight holds it, and taking
    a free trio lock yields too); the run's completion offered in that moment is not written by the flush."""
    with carried(tmp_path) as (store, durable):
        durable.offer(TextDeltaEvent(**IDS, seq=1, text="done"))
        async with trio.open_nursery() as nursery, durable.lock:  # the lock: a commit in flight
            nursery.start_soon(durable.flush)
            await trio.testing.wait_all_tasks_blocked()  # the flush found no terminal event and waits
            durable.offer(RunCompletedEvent(**IDS, seq=2, result=AssistantMessage("done")))
        # The flush is over and the run's own commit has not come yet: its log must not say it ended.
        record = store.run("r1")
        assert record is not None and not record.final
        assert [e.type for e in store.events("r1")] == ["text_delta"]
        await durable.commit("completed")
        record = store.run("r1")
        assert record is not None and record.status == "completed"
        assert [e.type for e in store.events("r1")] == ["text_delta", "run_completed"]

"""A carried run's terminal event reaches the store in the commit that ends the run, never in a flush before it.

A web node read a run's ``run_completed`` from its log while the run's row still said ``running`` (its view
``done: false``): the worker's periodic flush of streamed events had written the terminal event before the
commit that sets the final status.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.cluster.durable import DurableRun
from orchestrator.events import RunCompletedEvent, TextDeltaEvent
from orchestrator.messages import AssistantMessage
from orchestrator.store.runs_sql import sqlite_run_store


async def test_a_flush_leaves_the_terminal_event_to_the_commit_that_ends_the_run(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        store.create_run("s1", "r1", {"role": "user", "content": "hi"})
        (lease,) = store.claim("w1", 30.0)
        durable = DurableRun(store, lease, lambda event, config: False)
        ids = {"session_id": "s1", "request_id": "r1", "ts": 0.0}
        durable.offer(TextDeltaEvent(**ids, seq=1, text="do"))
        await durable.flush()  # streamed text goes at once
        assert [e.type for e in store.events("r1")] == ["text_delta"]
        durable.offer(TextDeltaEvent(**ids, seq=2, text="ne"))
        durable.offer(RunCompletedEvent(**ids, seq=3, result=AssistantMessage("done")))
        await durable.flush()
        record = store.run("r1")
        assert record is not None and not record.final
        assert [e.type for e in store.events("r1")] == ["text_delta"]  # nothing that says it ended, yet
        await durable.commit("completed")
        record = store.run("r1")
        assert record is not None and record.final
        assert [e.type for e in store.events("r1")] == ["text_delta", "text_delta", "run_completed"]
    finally:
        store.close()

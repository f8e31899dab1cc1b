"""A web node reading a run's stored events: a subagent's forwarded events are not the run's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from orchestrator import wire
from orchestrator.cluster.durable import DurableRun
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.events import AgentEvent, RunCompletedEvent, SubagentStartedEvent, TransitionEvent
from orchestrator.messages import AssistantMessage
from orchestrator.store.runs_sql import sqlite_run_store


def _ids(session: str, seq: int) -> dict[str, Any]:
    return {"session_id": session, "request_id": "r1" if session == "s1" else "child", "seq": seq, "ts": 0.0}


def _events() -> list[AgentEvent]:
    child = "s1:c1"
    return [
        TransitionEvent(
            **_ids("s1", 1), machine="request", region="phase", source="idle", trigger="start", dest="setup"
        ),
        SubagentStartedEvent(
            **_ids("s1", 2),
            tool_call_id="c1",
            agent="research",
            child_session_id=child,
            child_request_id="child",
            depth=1,
        ),
        TransitionEvent(
            **_ids(child, 3), machine="request", region="phase", source="idle", trigger="start", dest="setup"
        ),
        RunCompletedEvent(**_ids(child, 4), result=AssistantMessage("child answer")),
    ]


async def test_a_childs_run_completed_does_not_end_the_parents_stream_nor_enter_its_path(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    store.create_run("s1", "r1", {"role": "user", "content": "hi"})
    (lease,) = store.claim("w1", 30.0)
    durable = DurableRun(store, lease, lambda event, config: False)
    for event in _events():
        durable.offer(event)
    await durable.commit()
    backend = StoreBackend(store, poll_seconds=0.01)

    steps = await backend.transitions("r1")
    assert [(s.source, s.dest) for s in steps] == [("idle", "setup")]  # the child's start is not the run's

    seen: list[int] = []
    with trio.fail_after(20):
        batches = await backend.events("r1", 0)
        async for batch in batches:
            seen += [event["seq"] for event in batch]
            if seen[-1] == 4:  # the child ended; the run has not: its stream goes on
                final = RunCompletedEvent(**_ids("s1", 5), result=AssistantMessage("done"))
                durable.offer(final)
                await durable.commit("completed")
    assert seen == [1, 2, 3, 4, 5]
    assert wire.decode_event(store.events("r1")[-1].body).session_id == "s1"

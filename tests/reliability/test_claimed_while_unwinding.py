"""A run its worker claims again while the segment that parked it still unwinds there (its question was answered
at once) waits for that segment to end and goes on, instead of being given back, as if another process held its
session, and left unclaimed for a second; the worker counts it among the runs it holds while it carries it.

Real pieces: the run store on each backend and a Worker in this process carrying a scripted agent with ask_user.
An extension holds the parking segment after the commit that parks the run, until the run was claimed again.
"""

from __future__ import annotations

import logging

import pytest
import trio

from orchestrator import AgentExtension, AgentRunContext, AssistantMessage, ModelRequest, ScriptedModel, create_agent
from orchestrator.cluster import Worker
from orchestrator.events import AgentEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.messages import ToolMessage
from orchestrator.store.runs import RunRecord
from orchestrator.store.runs_sql import SQLRunStore
from tests.cluster.answers import post_yes
from tests.support import asks, call


def _ask_then_answer(request: ModelRequest) -> AssistantMessage:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return asks(call("q1", "ask_user", question="Go on?", options=["yes", "no"]))
    return AssistantMessage("Done.")


class SlowToLetGo(AgentExtension):
    """Holds the segment that parks a run, after its parking commit, until ``let_go`` is set."""

    def __init__(self) -> None:
        self.let_go = trio.Event()
        self.held = trio.Event()

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        if event.name == "run_parked" and not self.let_go.is_set():
            self.held.set()
            await self.let_go.wait()


async def _worker_held_at_park(store: SQLRunStore, caplog: pytest.LogCaptureFixture) -> tuple[Worker, SlowToLetGo]:
    """A worker carrying the scripted agent with ask_user and a ``SlowToLetGo``, and run r1 of session s1 created;
    its warnings captured."""
    caplog.set_level(logging.WARNING, logger="orchestrator.cluster")
    slow = SlowToLetGo()
    model = ScriptedModel([_ask_then_answer], repeat_last=True)
    worker = Worker(await create_agent(model, extensions=[AskUserExtension(), slow]), store, name="w1")
    store.create_run("s1", "r1", {"role": "user", "content": "go"})
    return worker, slow


async def _answered_while_held(store: SQLRunStore, slow: SlowToLetGo) -> RunRecord:
    """Once the run parked (and its segment is held), post the answer to its question; the parked row."""
    await slow.held.wait()
    parked = store.run("r1")
    assert parked is not None and parked.status == "parked"
    assert len(post_yes(store, parked)) == 1
    return parked


async def test_a_run_claimed_again_while_its_parking_segment_unwinds_waits_for_it_and_goes_on(
    store: SQLRunStore, caplog: pytest.LogCaptureFixture
) -> None:
    worker, slow = await _worker_held_at_park(store, caplog)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            parked = await _answered_while_held(store, slow)
            while (record := store.run("r1")) is not None and record.version == parked.version:
                await trio.sleep(0.01)  # answered (queued again), not claimed yet
            claimed = store.run("r1")
            assert claimed is not None and claimed.status == "running" and claimed.lease_owner == "w1"
            slow.let_go.set()  # the parking segment ends
            while (record := store.run("r1")) is not None and record.status != "completed":
                assert "r1" in worker.active  # held until it ends, though the segment before it ended
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    given_back = [r.getMessage() for r in caplog.records if "given back" in r.getMessage()]
    assert given_back == []
    assert [m.role for m in store.history("s1")] == ["user", "assistant", "tool", "assistant"]


async def test_a_run_whose_parking_segment_outlasts_the_wait_is_given_back_and_still_counted_as_held(
    store: SQLRunStore, caplog: pytest.LogCaptureFixture
) -> None:
    worker, slow = await _worker_held_at_park(store, caplog)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            try:
                await _answered_while_held(store, slow)
                while not any("given back" in r.getMessage() for r in caplog.records):
                    await trio.sleep(0.01)  # claimed again, and given back once the wait for the segment ran out
                await trio.sleep(0.1)
                assert "r1" in worker.active  # the segment that parked it still holds it here
            finally:
                slow.let_go.set()
            while (record := store.run("r1")) is not None and record.status != "completed":
                await trio.sleep(0.01)  # claimed once more after its back-off, and carried to its end
            while worker.active:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert [m.role for m in store.history("s1")] == ["user", "assistant", "tool", "assistant"]

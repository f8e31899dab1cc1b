"""Every model call is a cancellation point, and a request that never waits still lets other tasks run."""

from __future__ import annotations

import pytest
import trio
from support import asks, call

from orchestrator import AgentRunConfig, AssistantMessage, ScriptedModel, create_agent, tool
from orchestrator.runtime.run import YIELD_EVERY_CALLS

TURNS = 4 * YIELD_EVERY_CALLS


@tool
async def instant() -> str:
    """Returns without waiting for anything."""
    return "ok"


def _never_waiting_model() -> ScriptedModel:
    return ScriptedModel([asks(call(f"c{i}", "instant")) for i in range(TURNS)] + [AssistantMessage("done")])


async def test_a_request_whose_model_and_tools_never_wait_lets_other_tasks_run() -> None:
    client = await create_agent(_never_waiting_model(), tools=[instant], max_iterations=TURNS + 1)
    ran_meanwhile = 0
    finished = False

    async def other_task() -> None:
        nonlocal ran_meanwhile
        while not finished:
            ran_meanwhile += 1
            await trio.sleep(0)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other_task)
            await trio.sleep(0)
            ran_meanwhile = 0
            answer = await client.run("go", config=AgentRunConfig(session_id="s"))
            finished = True
    assert answer.content == "done"
    # At least one schedule point every YIELD_EVERY_CALLS model calls (TURNS + 1 calls in all). trio orders
    # the tasks of one scheduling batch at random: after the last of those points the request may finish
    # first, and the other task then sees ``finished`` without counting that turn.
    assert ran_meanwhile >= TURNS // YIELD_EVERY_CALLS - 1


async def test_a_request_cancelled_meanwhile_stops_at_its_next_model_call_even_when_nothing_waits() -> None:
    scope = trio.CancelScope()
    runs = 0

    @tool(name="instant")
    async def cancelling() -> str:
        """Cancels the request's caller on its third run, and returns without waiting."""
        nonlocal runs
        runs += 1
        if runs == 3:
            scope.cancel()
        return "ok"

    client = await create_agent(_never_waiting_model(), tools=[cancelling], max_iterations=TURNS + 1)
    with scope, pytest.raises(trio.Cancelled):
        await client.run("go", config=AgentRunConfig(session_id="s"))
    assert runs == 3
    assert [step.trigger for step in client.transitions("s")].count("respond") == 3

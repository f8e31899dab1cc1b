"""The results of concurrently run tool calls enter history in call order, not completion order.

Two calls of one response run at once and the second finishes first (the first
waits until the second's outcome has streamed). The outcomes stream as they
complete, but the session history and the next model request hold the results
in the order of the calls, run after run, so both are deterministic.
"""

from __future__ import annotations

import pytest
import trio

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ScriptedModel,
    ToolMessage,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent
from orchestrator.history import InMemoryHistory
from tests.support import asks, call


class SecondFirst(AgentExtension):
    """Holds the first call until the second call's outcome has streamed."""

    def __init__(self) -> None:
        self.second_done = trio.Event()
        self.outcomes: list[str] = []

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        if event.name in ("tool_completed", "tool_failed"):
            self.outcomes.append(event.call.id)  # type: ignore[attr-defined]
            if event.call.id == "c2":  # type: ignore[attr-defined]
                self.second_done.set()


@pytest.mark.parametrize("attempt", range(20))
async def test_results_of_parallel_calls_are_recorded_in_call_order(attempt: int) -> None:
    order = SecondFirst()

    @tool
    async def slow(x: str) -> str:
        """Waits for the other call."""
        await order.second_done.wait()
        return f"slow {x}"

    @tool
    async def fast(x: str) -> str:
        """Returns at once."""
        return f"fast {x}"

    model = ScriptedModel([asks(call("c1", "slow", x="a"), call("c2", "fast", x="b")), AssistantMessage("done")])
    history = InMemoryHistory()
    client = await create_agent(model, tools=[slow, fast], extensions=[order], history=history)
    with trio.fail_after(10):
        answer = await client.run("go", config=AgentRunConfig("s"))
    assert answer.content == "done"
    assert order.outcomes == ["c2", "c1"]  # the outcomes streamed as the calls completed
    kept = [(m.tool_call_id, m.content) for m in history.load("s") if isinstance(m, ToolMessage)]
    assert kept == [("c1", "slow a"), ("c2", "fast b")]
    sent = [m.tool_call_id for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert sent == ["c1", "c2"]


async def test_a_result_held_for_call_order_is_recorded_when_the_request_is_cancelled() -> None:
    order = SecondFirst()

    @tool
    async def slow(x: str) -> str:
        """Never finishes."""
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @tool
    async def fast(x: str) -> str:
        """Returns at once."""
        return f"fast {x}"

    model = ScriptedModel([asks(call("c1", "slow", x="a"), call("c2", "fast", x="b"))])
    history = InMemoryHistory()
    client = await create_agent(model, tools=[slow, fast], extensions=[order], history=history)
    with trio.fail_after(10):
        handle = await client.start("go", config=AgentRunConfig("s"))
        await order.second_done.wait()
        handle.cancel()
        await handle.wait()
    assert handle.state == "cancelled"
    kept = [(m.tool_call_id, m.status.value, m.content) for m in history.load("s") if isinstance(m, ToolMessage)]
    assert kept == [("c1", "cancelled", "not completed: request cancelled"), ("c2", "succeeded", "fast b")]

"""client.stream waits for its consumer: a bounded queue between the request and the reader."""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio
import trio.testing

from orchestrator import AgentRunConfig, AssistantMessage, ModelRequest, create_agent
from orchestrator.model import ModelEvent, ResponseCompletedEvent, TextDeltaEvent
from orchestrator.runtime.sinks import STREAM_BUFFER

DELTAS = 20_000


class EagerModel:
    """Yields every delta without awaiting anything, and counts what it produced."""

    def __init__(self) -> None:
        self.produced = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        for _ in range(DELTAS):
            self.produced += 1
            yield TextDeltaEvent("x")
        yield ResponseCompletedEvent(AssistantMessage("x" * DELTAS))


async def test_a_model_that_never_awaits_waits_for_a_slow_consumer() -> None:
    model = EagerModel()
    client = await create_agent(model)
    read = 0
    with trio.fail_after(30):
        async with client.stream("go", config=AgentRunConfig("s")) as events:
            async for event in events:
                read += event.name == "text_delta"
                if read in (1, 5_000):
                    await trio.testing.wait_all_tasks_blocked()  # the request runs as far as it can
                    assert model.produced - read <= STREAM_BUFFER + 1
    assert read == DELTAS == model.produced


async def test_closing_a_full_stream_cancels_without_waiting_for_the_reader() -> None:
    model = EagerModel()
    client = await create_agent(model)
    with trio.fail_after(5):
        async with client.stream("go", config=AgentRunConfig("s")) as events:
            async for event in events:
                if event.name == "text_delta":
                    await trio.testing.wait_all_tasks_blocked()
                    break
        assert client.state("s") is None
    assert client.agent.transitions("s")[-1].dest == "cancelled"
    assert model.produced < DELTAS


async def test_a_dropped_full_stream_releases_its_session() -> None:
    model = EagerModel()
    client = await create_agent(model)
    with trio.fail_after(5):
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "text_delta":
                await trio.testing.wait_all_tasks_blocked()
                break
        # the dropped stream's request ends by itself; the next request of the session waits for that end
        client.agent.model = _Quick()
        names = [e.name async for e in client.stream("again", config=AgentRunConfig("s"))]
    assert names[-1] == "run_completed"


class _Quick:
    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ResponseCompletedEvent(AssistantMessage("ok"))


async def test_a_cancelled_consumer_that_never_waits_reads_a_bounded_number_of_queued_events() -> None:
    from orchestrator.runtime.stream import CHECK_EVERY_EVENTS

    model = EagerModel()
    client = await create_agent(model)
    read_after_cancel = 0
    cancelled = False
    with trio.fail_after(5):
        with trio.CancelScope() as scope:
            async with client.stream("go", config=AgentRunConfig("s")) as events:
                async for event in events:
                    if cancelled:
                        read_after_cancel += 1
                    elif event.name == "text_delta":
                        await trio.testing.wait_all_tasks_blocked()  # the queue is full
                        scope.cancel()
                        cancelled = True
        assert scope.cancelled_caught
    assert read_after_cancel <= CHECK_EVERY_EVENTS
    assert client.agent.transitions("s")[-1].dest == "cancelled"
    assert model.produced < DELTAS

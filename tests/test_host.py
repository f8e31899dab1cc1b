"""AgentHost: the agent's trio loop in its own thread, driven from asyncio and from plain threads.

These tests are plain functions: each runs its own ``asyncio.run`` (or no loop at all).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest
from support import asks, call

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ModelRequest,
    ScriptedModel,
    SessionBusy,
    UserMessage,
    create_agent,
)
from orchestrator.events import AgentEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.host import AgentHost, HostClosed
from orchestrator.model import ModelEvent, ResponseCompletedEvent, TextDeltaEvent
from orchestrator.runtime.handle import RunCancelled, UnknownRun
from orchestrator.runtime.run import CLEANUP_SECONDS

LIMIT = 10.0


def ask_then_answer(request: ModelRequest) -> AssistantMessage:
    """Asks whenever the last message is the user's input; answers once the question has its result."""
    if isinstance(request.messages[-1], UserMessage):
        return asks(call("q1", "ask_user", question="Deploy?", options=["yes", "no"]))
    return AssistantMessage("deployed")


def asking_host() -> AgentHost:
    model = ScriptedModel([ask_then_answer], repeat_last=True)
    return AgentHost(lambda: create_agent(model, extensions=[AskUserExtension()]))


def answer(value: str) -> ExternalEvent:
    return ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": value})


def test_an_approval_answered_from_asyncio_code() -> None:
    async def main() -> tuple[list[AgentEvent], str, list[str]]:
        with asking_host() as host:
            run = await host.start("ship it", config=AgentRunConfig("s1"))
            with pytest.raises(SessionBusy):
                await host.start("again", config=AgentRunConfig("s1"))
            seen: list[AgentEvent] = []
            taken: list[str] = []
            async for event in run.events():
                seen.append(event)
                if event.name == "ask_user":
                    [waiting] = await host.pending()
                    assert (waiting.tool_call_id, waiting.session_id) == ("q1", "s1")
                    refused = await host.deliver(answer("maybe"), config=AgentRunConfig("s1"))
                    assert not refused and refused.refused
                    delivery = await host.deliver(answer("yes"), config=AgentRunConfig("s1"))
                    taken = list(delivery.accepted)
            result = await run.result()
            assert await host.pending() == []
            return seen, result.content, taken

    seen, content, taken = asyncio.run(asyncio.wait_for(main(), LIMIT))
    assert content == "deployed" and taken == ["AskUserExtension"]
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].name == "run_completed"
    assert [e.name for e in seen].count("tool_completed") == 1


def test_a_consumer_that_leaves_and_comes_back_sees_every_event_once() -> None:
    async def main() -> tuple[list[AgentEvent], list[AgentEvent]]:
        with asking_host() as host:
            run = await host.start("ship it", config=AgentRunConfig("s1"))
            first: list[AgentEvent] = []
            async for event in run.events():
                first.append(event)
                if event.name == "ask_user":
                    break
            assert await host.deliver(answer("no"), config=AgentRunConfig("s1"))
            await run.result()
            rest = [e async for e in host.events(run.request_id, after=first[-1].seq)]
            whole = [e async for e in run.events()]
            assert first + rest == whole
            return first, rest

    first, rest = asyncio.run(asyncio.wait_for(main(), LIMIT))
    assert rest[0].seq == first[-1].seq + 1 and rest[-1].name == "run_completed"


def test_cancellation_from_asyncio_cancels_the_request() -> None:
    async def main() -> None:
        with asking_host() as host:
            # by the host's cancel
            run = await host.start("ship it", config=AgentRunConfig("a"))
            async for event in run.events():
                if event.name == "ask_user":
                    await run.cancel()
            with pytest.raises(RunCancelled):
                await run.result()
            names = [e.name async for e in run.events()]
            assert "tool_cancelled" in names and names[-1] == "run_cancelled"
            # by cancelling the asyncio task that awaits host.run(...)
            task = asyncio.create_task(host.run("ship it", config=AgentRunConfig("b")))
            while not await host.pending("b"):
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

            async def last_edge() -> str:
                return host.client.agent.transitions("b")[-1].dest

            async def running() -> list[str]:
                return host.client.agent.running()

            for _ in range(int(CLEANUP_SECONDS * 100)):
                if "b" not in await host.call(running):
                    break
                await asyncio.sleep(0.01)
            assert await host.call(last_edge) == "cancelled"
            assert await host.pending() == []
            with pytest.raises(UnknownRun):
                await host.cancel("no-such-run")

    asyncio.run(asyncio.wait_for(main(), LIMIT))


class EagerModel:
    """Yields its deltas without awaiting anything."""

    def __init__(self, deltas: int) -> None:
        self.deltas = deltas

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        for _ in range(self.deltas):
            yield TextDeltaEvent("x")
        yield ResponseCompletedEvent(AssistantMessage("x" * self.deltas))


def test_no_event_is_lost_across_the_thread_boundary_with_a_slow_consumer() -> None:
    deltas = 5_000

    async def main() -> list[AgentEvent]:
        async with AgentHost(lambda: create_agent(EagerModel(deltas))) as host:
            run = await host.start("go", config=AgentRunConfig("s"), retain_events=deltas + 100)
            seen: list[AgentEvent] = []
            async for event in run.events():
                seen.append(event)
                if len(seen) % 500 == 0:
                    await asyncio.sleep(0.001)  # a slow consumer: the run does not wait for it
            return seen

    seen = asyncio.run(asyncio.wait_for(main(), LIMIT * 3))
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert sum(e.name == "text_delta" for e in seen) == deltas


def test_plain_threads_use_the_blocking_calls() -> None:
    with asking_host() as host:
        outcome: dict[str, object] = {}

        def worker() -> None:
            run = host.sync.start("ship it", config=AgentRunConfig("t"))
            for event in host.sync.events(run.request_id):
                if event.name == "ask_user":
                    outcome["pending"] = [p.tool_call_id for p in host.sync.pending("t")]
                    outcome["taken"] = bool(host.sync.deliver(answer("yes"), config=AgentRunConfig("t")))
            outcome["result"] = host.sync.result(run.request_id).content

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(LIMIT)
        assert not thread.is_alive()
    assert outcome == {"pending": ["q1"], "taken": True, "result": "deployed"}
    with pytest.raises(HostClosed):
        host.sync.pending()


def test_a_factory_error_is_raised_by_the_constructor() -> None:
    def broken() -> object:
        raise ValueError("no model configured")

    with pytest.raises(ValueError, match="no model configured"):
        AgentHost(broken)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="AgentClient"):
        AgentHost(lambda: "not a client")  # type: ignore[arg-type, return-value]


def test_closing_cancels_running_requests() -> None:
    host = asking_host()

    async def main() -> None:
        run = await host.start("ship it", config=AgentRunConfig("c"))
        async for event in run.events():
            if event.name == "ask_user":
                break
        await host.aclose()
        with pytest.raises(HostClosed):
            await host.pending()

    assert host.state == "serving"
    asyncio.run(asyncio.wait_for(main(), LIMIT))
    assert host.state == "closed"
    assert [(s.source, s.trigger, s.dest) for s in host._machine.history] == [
        ("starting", "ready", "serving"),
        ("serving", "close", "closing"),
        ("closing", "finish", "closed"),
    ]
    host.close()  # closing twice changes nothing
    assert not host._thread.is_alive()
    assert host.client.agent.transitions("c")[-1].dest == "cancelled"


def test_a_reader_has_ended_once_it_was_handed_the_last_event_of_an_ended_run() -> None:
    async def main() -> list[tuple[list[int], bool]]:
        with asking_host() as host:
            run = await host.start("ship it", config=AgentRunConfig("s1"))
            last = 0
            async for event in run.events():
                last = event.seq
                if event.name == "ask_user":
                    assert await host.deliver(answer("yes"), config=AgentRunConfig("s1"))
            await run.result()
            follower = await host.call_now(host.client.attach(run.request_id).events, last - 2)

            async def read() -> list[tuple[list[int], bool]]:
                seen = []
                while True:
                    batch = await follower.batch(1)
                    seen.append(([event.seq for event in batch], follower.ended))
                    if not batch:
                        return seen

            return await host.call(read)

    seen = asyncio.run(asyncio.wait_for(main(), LIMIT))
    assert [ended for _, ended in seen] == [False, True, True]
    assert [len(seqs) for seqs, _ in seen] == [1, 1, 0]

"""``AgentHost.call_now`` and ``open_batches``: reads and stream openings that take one crossing, no task.

Plain functions, each with its own ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ModelRequest,
    ScriptedModel,
    UserMessage,
    create_agent,
)
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.host import AgentHost, HostBatches, HostClosed
from orchestrator.runtime.handle import EventsExpired, UnknownRun
from orchestrator.server.hosted import HostBackend
from tests.support import asks, call

LIMIT = 10.0


def test_call_now_runs_a_plain_function_in_the_hosts_thread_and_gives_back_its_value_or_error() -> None:
    host = AgentHost(lambda: create_agent(ScriptedModel([AssistantMessage("done")])), name="the-host")

    def where(suffix: str) -> str:
        return threading.current_thread().name + suffix

    def refuse() -> None:
        raise LookupError("nothing here")

    async def main() -> None:
        assert await host.call_now(where, "!") == "the-host!"
        with pytest.raises(LookupError, match="nothing here"):
            await host.call_now(refuse)
        await host.aclose()
        with pytest.raises(HostClosed):
            await host.call_now(where, "?")

    asyncio.run(asyncio.wait_for(main(), LIMIT))


def test_a_stream_opened_in_one_crossing_reads_its_run_and_an_unread_one_stops_its_reader() -> None:
    """``HostBackend.events`` and ``follow`` (whether the run had ended, and its stream) open in one crossing."""
    def ask_then_answer(request: ModelRequest) -> AssistantMessage:
        if isinstance(request.messages[-1], UserMessage):
            return asks(call("q1", "ask_user", question="Deploy?", options=["yes", "no"]))
        return AssistantMessage("deployed")

    model = ScriptedModel([ask_then_answer], repeat_last=True)
    host = AgentHost(lambda: create_agent(model, extensions=[AskUserExtension()]))
    backend = HostBackend(host)

    async def readers() -> int:
        assert host._nursery is not None
        return len(host._nursery.child_tasks)

    async def main() -> None:
        with pytest.raises(UnknownRun):
            await backend.events("no-such-run", 0)
        short = await host.start("ship it", config=AgentRunConfig("s0"), retain_events=2)
        while not await host.pending("s0"):
            await asyncio.sleep(0.01)
        with pytest.raises(EventsExpired):
            await backend.events(short.request_id, 0)
        run = await host.start("ship it", config=AgentRunConfig("s1"))
        while not await host.pending("s1"):
            await asyncio.sleep(0.01)
        view = await backend.run(run.request_id)
        assert (view.session_id, view.done) == ("s1", False)

        before = await host.call(readers)
        last = await host.call_now(_last_seq, host, run.request_id)
        unread = await backend.events(run.request_id, last)  # the run waits for its answer: its reader parks
        assert await host.call(readers) == before + 1 and isinstance(unread, HostBatches)
        await unread.aclose()  # never read: its reader stops all the same
        while await host.call(readers) != before:
            await asyncio.sleep(0.01)

        with pytest.raises(UnknownRun):
            await backend.follow("no-such-run", 0)
        ended, follower = await backend.follow(run.request_id, last)
        assert not ended
        await host.deliver(_answer(), config=AgentRunConfig("s1"))
        kinds = [event["type"] async for batch in follower for event in batch]
        assert kinds[-1] == "run_completed" and (await backend.run(run.request_id)).done
        ended, rest = await backend.follow(run.request_id, last)
        assert ended and [event["type"] async for batch in rest for event in batch] == kinds

    try:
        asyncio.run(asyncio.wait_for(main(), LIMIT))
    finally:
        host.close()


def _last_seq(host: AgentHost, request_id: str) -> int:
    return host.client.attach(request_id).last_seq


def _answer() -> ExternalEvent:
    return ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "yes"})

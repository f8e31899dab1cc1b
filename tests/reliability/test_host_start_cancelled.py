"""An asyncio caller of ``host.start`` cancelled before it holds its run leaves no run behind.

A caller whose ``await host.start(...)`` is cancelled (``asyncio.wait_for`` with a
tiny timeout) never receives the run, so it cannot cancel it. The host does:
the session takes the next start (no SessionBusy), and the run ends
``cancelled`` or never starts, whichever side of the thread boundary the
cancellation reached first. Both orders are forced: the host's thread busy while
the cancellation arrives, and the caller's loop busy while the run starts.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import trio

from orchestrator import AgentRunConfig, AssistantMessage, ModelRequest, ScriptedModel, create_agent
from orchestrator.host import AgentHost, HostedRun
from orchestrator.runtime.handle import RunCancelled, UnknownRun

LIMIT = 10.0
STALL = 0.05


async def blocks(request: ModelRequest) -> AssistantMessage:
    """A model call that never answers."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def start_with_host_busy(host: AgentHost) -> HostedRun:
    stalled = threading.Event()

    async def stall_host_thread() -> None:
        stalled.set()
        time.sleep(STALL)  # blocks the host's trio thread: the cancellation arrives before the start runs

    stalling = asyncio.ensure_future(host.call(stall_host_thread))
    await asyncio.to_thread(stalled.wait, LIMIT)
    try:
        return await asyncio.wait_for(host.start("go", config=AgentRunConfig("s", "lost")), timeout=1e-3)
    finally:
        await stalling


async def start_with_loop_busy(host: AgentHost) -> HostedRun:
    starting = asyncio.ensure_future(host.start("go", config=AgentRunConfig("s", "lost")))
    await asyncio.sleep(0)  # the start is submitted to the host's thread
    time.sleep(STALL)  # the caller's loop stalls while the host's thread starts the run
    # a timeout already past: the cancellation and the started run's handle reach the caller together
    return await asyncio.wait_for(starting, timeout=0)


@pytest.mark.parametrize("attempt", range(3))
@pytest.mark.parametrize("busy", ["host", "loop"])
def test_a_cancelled_start_cancels_the_run_it_started(attempt: int, busy: str) -> None:
    async def main() -> list[str] | None:
        # grace_seconds: the runs of a model that never answers are cancelled at close, not waited for
        async with AgentHost(lambda: create_agent(ScriptedModel([blocks], repeat_last=True)), grace_seconds=0.5) as host:
            with pytest.raises(TimeoutError):
                await (start_with_host_busy(host) if busy == "host" else start_with_loop_busy(host))
            # the next start of the session is taken, not refused as SessionBusy
            second = await host.start("again", config=AgentRunConfig("s", "next"))
            try:
                with pytest.raises(RunCancelled):
                    await asyncio.wait_for(host.result("lost"), LIMIT)
            except UnknownRun:
                return None  # the cancellation came first: the run never started
            names = [event.name async for event in host.events("lost")]
            await second.cancel()
            return names

    names = asyncio.run(asyncio.wait_for(main(), LIMIT * 2))
    if busy == "loop":
        assert names is not None, "the run started while the caller's loop was busy"
    if names is not None:
        assert "run_started" in names and names[-1] == "run_cancelled", names

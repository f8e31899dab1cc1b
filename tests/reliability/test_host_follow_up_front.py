"""Following a run through an AgentHost says at once that the run is unknown or its events expired.

A route must answer 404 or 410 before it starts its response; ``host.events`` is lazy and raises only
at the first event, ``host.follow`` raises when awaited.
"""

from __future__ import annotations

import asyncio

import pytest

from orchestrator import AgentRunConfig, AssistantMessage, ScriptedModel, create_agent
from orchestrator.host import AgentHost
from orchestrator.runtime.handle import EventsExpired, UnknownRun


def test_an_unknown_run_and_expired_events_raise_when_the_follower_is_opened() -> None:
    with AgentHost(lambda: create_agent(ScriptedModel([AssistantMessage("done")]))) as host:

        async def main() -> None:
            with pytest.raises(UnknownRun):
                await host.follow("no-such-run")
            run = await host.start("go", config=AgentRunConfig("s"), retain_events=2)
            await run.result()
            with pytest.raises(EventsExpired):
                await host.follow(run.request_id, after=0)
            last = await host.call(_last_seq, host, run.request_id)
            events = await host.follow(run.request_id, after=last - 1)  # a retained cursor opens and reads the rest
            assert [event.seq async for event in events] == [last]

        asyncio.run(main())


async def _last_seq(host: AgentHost, request_id: str) -> int:
    return host.client.attach(request_id).last_seq

"""A finished request is freed by reference counting: it leaves no reference cycle for the collector."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
import trio
from support import asks, call

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    ResponseRouter,
    ScriptedModel,
    ToolCall,
    create_agent,
    tool,
)
from orchestrator.errors import AgentError
from orchestrator.runtime.pending import require_bool


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


class Keeper(AgentExtension):
    """Keeps only weak references to each request's context, and pauses ``noop`` for an approval."""

    def __init__(self, pause: bool = False) -> None:
        self.contexts: list[weakref.ref[AgentRunContext]] = []
        self.router = ResponseRouter()
        self.pause = pause

    async def before_run(self, context: AgentRunContext) -> None:
        self.contexts.append(weakref.ref(context))

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        if self.pause:
            await self.router.wait(context, call.id, response_event="approval", validate=require_bool("approved"))

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        return self.router.accept(config, event)


@pytest.fixture
def collector_off() -> Iterator[None]:
    """No automatic collection: whatever is freed here was freed by reference counting."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _script() -> ScriptedModel:
    return ScriptedModel([asks(call("c1", "noop")), AssistantMessage("done")])


async def test_a_request_run_to_its_end_is_freed_without_the_collector(collector_off: None) -> None:
    keeper = Keeper()
    client = await create_agent(_script(), tools=[noop], extensions=[keeper])
    answer = await client.run("go", config=AgentRunConfig(session_id="s"))
    assert answer.content == "done"
    assert keeper.contexts and keeper.contexts[0]() is None


async def test_a_streamed_request_is_freed_without_the_collector(collector_off: None) -> None:
    keeper = Keeper()
    client = await create_agent(_script(), tools=[noop], extensions=[keeper])
    async with client.stream("go", config=AgentRunConfig(session_id="s")) as stream:
        names = [event.name async for event in stream]
    assert names[-1] == "run_completed"
    del stream
    assert keeper.contexts[0]() is None


async def test_a_request_paused_for_an_approval_is_freed_without_the_collector(collector_off: None) -> None:
    keeper = Keeper(pause=True)
    client = await create_agent(_script(), tools=[noop], extensions=[keeper])
    config = AgentRunConfig(session_id="s")

    async def approve() -> None:
        while not client.agent.emit_external_event(
            ExternalEvent("approval", {"tool_call_id": "c1", "approved": True}), config=config
        ):
            await trio.sleep(0.001)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(approve)
            await client.run("go", config=config)
    assert keeper.contexts[0]() is None


async def test_a_request_cancelled_while_paused_for_an_approval_is_freed_without_the_collector(
    collector_off: None,
) -> None:
    keeper = Keeper(pause=True)
    client = await create_agent(_script(), tools=[noop], extensions=[keeper])
    with trio.fail_after(5), trio.CancelScope() as cancelled:

        async def cancel_once_paused() -> None:
            while not client.pending():
                await trio.sleep(0.001)
            cancelled.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_once_paused)
            await client.run("go", config=AgentRunConfig(session_id="s"))
    assert cancelled.cancelled_caught
    assert keeper.contexts[0]() is None


async def test_a_kept_context_still_reads_its_messages_but_not_its_ended_request() -> None:
    kept: list[AgentRunContext] = []

    class Holder(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            kept.append(context)

    client = await create_agent(_script(), tools=[noop], extensions=[Holder()])
    await client.run("go", config=AgentRunConfig(session_id="s"))
    context = kept[0]
    assert [message.role for message in context.messages][-1] == "assistant"
    with pytest.raises(AgentError, match="has ended"):
        _ = context.states

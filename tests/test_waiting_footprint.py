"""What a request waiting for an approval keeps in memory (traced allocations, not timings)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import AsyncIterator

import trio
from support import asks, call

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    Message,
    ModelRequest,
    ResponseRouter,
    ToolCall,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.events import TransitionEvent
from orchestrator.model import ModelEvent, ResponseCompletedEvent
from orchestrator.runtime.pending import require_bool

SESSIONS = 300
#: Each waiting request (its stream, its task, its machines and its messages) stays under this.
LIMIT_BYTES = 10 * 1024


@tool
async def guarded() -> str:
    """Runs once approved."""
    return "ok"


class Approval(AgentExtension):
    """Pauses every call until an ``approval`` external event approves it."""

    def __init__(self) -> None:
        self.router = ResponseRouter()

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        await self.router.wait(context, call.id, response_event="approval", validate=require_bool("approved"))

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        return self.router.accept(config, event)


class Responder:
    """Asks for the guarded call in answer to the user, and answers after its result."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        last: Message = request.messages[-1]
        if isinstance(last, UserMessage):
            yield ResponseCompletedEvent(asks(call("c1", "guarded")))
        else:
            yield ResponseCompletedEvent(AssistantMessage("done"))


async def test_a_request_waiting_for_an_approval_keeps_little_memory() -> None:
    approval = Approval()
    client = await create_agent(Responder(), tools=[guarded], extensions=[approval])
    waiting = 0
    all_waiting = trio.Event()

    async def session(index: int) -> None:
        nonlocal waiting
        async with client.stream("go", config=AgentRunConfig(session_id=f"s{index}")) as stream:
            async for event in stream:
                if isinstance(event, TransitionEvent) and event.dest == "awaiting_approval":
                    waiting += 1
                    if waiting == SESSIONS:
                        all_waiting.set()

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for index in range(SESSIONS):
                    nursery.start_soon(session, index)
                await all_waiting.wait()
                gc.collect()
                per_request = (tracemalloc.get_traced_memory()[0] - before) / SESSIONS
                for index in range(SESSIONS):
                    event = ExternalEvent("approval", {"tool_call_id": "c1", "approved": True})
                    assert client.agent.emit_external_event(event, config=AgentRunConfig(session_id=f"s{index}"))
    finally:
        tracemalloc.stop()
    assert per_request < LIMIT_BYTES, f"{per_request / 1024:.1f} KiB per waiting request"

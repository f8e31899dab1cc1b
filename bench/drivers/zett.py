"""The workloads through the public API of zett-agent 0.2.1 (asyncio).

The package is optional (the ``bench`` extra); without it this module fails to
import and the benchmark reports the peer as not available.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, cast

from zett_agent.agent import AgentRunConfig, AgentRunContext
from zett_agent.client import AgentClient, create_agent
from zett_agent.events import AgentEvent, AgentEventType
from zett_agent.extensions.base import AgentExtension
from zett_agent.extensions.external import ExternalEvent, ExternalEventExtension
from zett_agent.messages import AnyMessage, AssistantMessage, ToolCall, ToolMessage, UserMessage
from zett_agent.model import ModelEvent, ModelRequest, ModelResponse, RetryOptions
from zett_agent.tools.base import tool

from bench.drivers import Unavailable
from bench.drivers.common import (
    APPROVAL_REQUESTED,
    APPROVAL_RESPONSE,
    CALL_ID,
    GUARDED_TOOL,
    PIECE,
    CpuClock,
    Emitter,
    MemoryProbe,
    PeakMemory,
    concurrency_figures,
    latency_result,
    session_figures,
    steering_text,
    streaming_figures,
)

NO_RETRY = RetryOptions(max_retries=0)


@tool
async def noop() -> str:
    """Do nothing and succeed.

    Guidelines:
        - Call it when the script says so.
    """
    return "ok"


@tool(name=GUARDED_TOOL)
async def guarded() -> str:
    """Do nothing once the user approved the call.

    Guidelines:
        - Call it when the script says so.
    """
    return "ok"


class Script:
    """Plays prepared assistant messages in order, with no latency."""

    retry = NO_RETRY

    def __init__(self) -> None:
        self.messages: list[AssistantMessage] = []
        self.index = 0

    def load(self, messages: list[AssistantMessage]) -> None:
        self.messages, self.index = messages, 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        message = self.messages[self.index]
        self.index += 1
        yield ModelEvent.completed(ModelResponse(message))


class Responder:
    """Answers from the last message: the first user input gets one tool call, the rest 'done'."""

    retry = NO_RETRY

    def __init__(self, call: ToolCall, on_request: Callable[[AnyMessage], None] | None = None) -> None:
        self.call = call
        self.on_request = on_request

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        last = request.messages[-1]
        if self.on_request is not None:
            self.on_request(last)
        if isinstance(last, UserMessage) and last.text == "go":
            call = ToolCall(self.call.id, self.call.name, dict(self.call.arguments))
            yield ModelEvent.completed(ModelResponse(AssistantMessage(tool_calls=(call,))))
        else:
            yield ModelEvent.completed(ModelResponse(AssistantMessage(content="done")))


class Deltas:
    """Streams ``deltas`` pieces without awaiting, then a tool call while fewer than ``tool_turns`` results."""

    retry = NO_RETRY

    def __init__(self, deltas: int, latency: float = 0.0, tool_turns: int = 0) -> None:
        self.deltas = deltas
        self.latency = latency
        self.tool_turns = tool_turns

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if self.latency:
            await asyncio.sleep(self.latency)
        for _ in range(self.deltas):
            yield ModelEvent.text(PIECE)
        done = sum(isinstance(message, ToolMessage) for message in request.messages)
        if done < self.tool_turns:
            call = ToolCall(f"call-{done}", "noop", {})
            yield ModelEvent.completed(ModelResponse(AssistantMessage(tool_calls=(call,))))
        else:
            yield ModelEvent.completed(ModelResponse(AssistantMessage(content="done")))


async def _consume(client: AgentClient, session: str, wait: float) -> int:
    seen = 0
    events = client.stream("go", config=AgentRunConfig(session_id=session))
    async with aclosing(cast(AsyncGenerator[AgentEvent, None], events)):
        async for event in events:
            if wait:
                await asyncio.sleep(wait)
                wait = 0.0
            if event.type is AgentEventType.TEXT_DELTA:
                seen += 1
    return seen


# per-turn overhead ------------------------------------------------------------


def _script(turns: int) -> list[AssistantMessage]:
    script = [AssistantMessage(tool_calls=(ToolCall(f"call-{i}", "noop", {}),)) for i in range(turns)]
    script.append(AssistantMessage(content="done"))
    return script


def turns(turns: int, repeats: int, mode: str = "run") -> dict[str, Any]:
    if mode not in ("run", "bare"):
        raise Unavailable(f"no {mode} mode for zett-agent (its run() consumes its stream)")
    extensions: list[AgentExtension] | None = [] if mode == "bare" else None

    async def main() -> list[float]:
        model = Script()
        client = await create_agent(model, tools=[noop], max_iterations=turns + 1, extensions=extensions)
        seconds: list[float] = []
        for repeat in range(repeats + 1):
            model.load(_script(turns))
            started = time.perf_counter()
            await client.run("go", config=AgentRunConfig(session_id=f"s{repeat}"))
            if repeat:
                seconds.append(time.perf_counter() - started)
        return seconds

    return {"turns": turns, "mode": mode, "seconds": asyncio.run(main())}


# concurrency ------------------------------------------------------------------


class Approval(ExternalEventExtension):
    """Pauses the guarded tool in before_tool until an approval_response arrives."""

    def __init__(self) -> None:
        super().__init__(response_event_name=APPROVAL_RESPONSE, correlation_field="tool_call_id")

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        if call.name != GUARDED_TOOL:
            return
        async with self._wait_for_external_event(context, call.id):
            await context.emit(
                AgentEvent(
                    AgentEventType.CUSTOM,
                    session_id=context.session_id,
                    name=APPROVAL_REQUESTED,
                    payload={"tool_call_id": call.id},
                )
            )

    async def after_tool(
        self, context: AgentRunContext, call: ToolCall, result: ToolMessage, error: Exception | None
    ) -> None:
        # The static tool does not consume the staged response; drop it here.
        self._discard_staged(context)


def sessions(count: int, trace: bool, extension: str = "approval") -> dict[str, Any]:
    if extension == "approval":
        installed: AgentExtension = Approval()
        call = ToolCall(CALL_ID, GUARDED_TOOL, {})
        requested, response = APPROVAL_REQUESTED, APPROVAL_RESPONSE
    elif extension == "plan_mode":
        from zett_agent.extensions.plan_mode import PlanModeExtension

        installed = PlanModeExtension()
        call = ToolCall(CALL_ID, "enter_plan_mode", {"reason": "benchmark"})
        requested, response = "enter_plan_mode", "enter_plan_mode_response"
    else:
        raise Unavailable(f"no {extension} variant")
    probe = MemoryProbe(trace)

    async def main() -> dict[str, Any]:
        client = await create_agent(Responder(call), tools=[guarded], extensions=[installed])
        await client.run("warm up", config=AgentRunConfig(session_id="warm-up"))
        waiting = 0
        all_waiting = asyncio.Event()

        async def session(index: int) -> None:
            nonlocal waiting
            events = client.stream("go", config=AgentRunConfig(session_id=f"s{index}"))
            async with aclosing(cast(AsyncGenerator[AgentEvent, None], events)):
                async for event in events:
                    if event.type is AgentEventType.CUSTOM and event.name == requested:
                        waiting += 1
                        if waiting == count:
                            all_waiting.set()

        def approve(index: int) -> bool:
            session_id = f"s{index}"
            payload = {"tool_call_id": CALL_ID, "approved": True, "session_id": session_id}
            accepted = client.agent.emit_external_event(
                ExternalEvent(response, payload), config=AgentRunConfig(session_id=session_id)
            )
            return bool(accepted)

        probe.start()
        started = time.perf_counter()
        tasks = [asyncio.create_task(session(index)) for index in range(count)]
        await all_waiting.wait()
        filled = time.perf_counter()
        probe.waiting()
        approving = time.perf_counter()
        accepted = sum(approve(index) for index in range(count))
        await asyncio.gather(*tasks)
        drained = time.perf_counter()
        probe.stop()
        return session_figures(probe, count, filled - started, drained - approving, accepted=accepted)

    result: dict[str, Any] = asyncio.run(main())
    return result


# streaming --------------------------------------------------------------------


def streaming(deltas: int, repeats: int, slow: bool = False, pause: float = 0.2) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        client = await create_agent(Deltas(deltas))
        await _consume(client, "warm-up", 0.0)
        if slow:
            with PeakMemory() as memory:
                seen = await _consume(client, "slow", pause)
            return streaming_figures(deltas, [], seen, memory.peak)
        seconds: list[float] = []
        for repeat in range(repeats):
            started = time.perf_counter()
            seen = await _consume(client, f"s{repeat}", 0.0)
            seconds.append(time.perf_counter() - started)
        return streaming_figures(deltas, seconds, seen)

    result: dict[str, Any] = asyncio.run(main())
    return result


# many concurrent sessions -----------------------------------------------------


def concurrent(sessions: int, tool_turns: int, latency: float, deltas: int) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        client = await create_agent(Deltas(deltas, latency, tool_turns), tools=[noop])
        await _consume(client, "warm-up", 0.0)
        with CpuClock() as clock:
            counts = await asyncio.gather(*(_consume(client, f"s{index}", 0.0) for index in range(sessions)))
        return concurrency_figures(clock, sessions, sessions * (tool_turns + 1), sum(counts))

    result: dict[str, Any] = asyncio.run(main())
    return result


# steering latency -------------------------------------------------------------


def _wake(loop: asyncio.AbstractEventLoop, done: asyncio.Event) -> None:
    loop.call_soon_threadsafe(done.set)


def steering(runs: int) -> dict[str, Any]:
    emitter = Emitter()
    seen: dict[str, float] = {}
    current = {"index": 0}
    clients: list[AgentClient] = []

    def note(last: AnyMessage) -> None:
        if isinstance(last, UserMessage) and last.text.startswith("steer "):
            seen[last.text] = time.perf_counter()

    def emit(index: int, text: str) -> bool:
        event = ExternalEvent("steering_message", {"content": text})
        return bool(clients[0].agent.emit_external_event(event, config=AgentRunConfig(session_id=f"s{index}")))

    @tool
    async def work() -> str:
        """Run until the steering message was sent from the other thread.

        Guidelines:
            - Call it when the script says so.
        """
        index = current["index"]
        text = steering_text(index)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        emitter.submit(text, lambda: emit(index, text), lambda: _wake(loop, done))
        await done.wait()
        return "ok"

    async def main() -> None:
        model = Responder(ToolCall(CALL_ID, "work", {}), note)
        clients.append(await create_agent(model, tools=[work]))
        for index in range(runs):
            current["index"] = index
            await clients[0].run("go", config=AgentRunConfig(session_id=f"s{index}"))

    try:
        asyncio.run(main())
    finally:
        emitter.close()
    return latency_result(emitter, seen, runs)

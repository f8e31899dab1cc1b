"""The workloads through orchestrator's public API (create_agent, extensions, events)."""

from __future__ import annotations

import importlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

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
from orchestrator import (
    AgentClient,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExtensionEvent,
    ExternalEvent,
    Message,
    ResponseRouter,
    ToolCall,
    ToolMessage,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.events import TextDeltaEvent as StreamedDelta
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent, TextDeltaEvent
from orchestrator.runtime.pending import require_bool


@tool
async def noop() -> str:
    """Do nothing and succeed."""
    return "ok"


@tool(name=GUARDED_TOOL)
async def guarded() -> str:
    """Do nothing once the user approved the call."""
    return "ok"


class Script:
    """Plays prepared assistant messages in order, with no latency."""

    def __init__(self) -> None:
        self.messages: list[AssistantMessage] = []
        self.index = 0

    def load(self, messages: list[AssistantMessage]) -> None:
        self.messages, self.index = messages, 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        message = self.messages[self.index]
        self.index += 1
        yield ResponseCompletedEvent(message)


class Responder:
    """Answers from the last message: the first user input gets one tool call, the rest 'done'."""

    def __init__(self, call: ToolCall, on_request: Callable[[Message], None] | None = None) -> None:
        self.call = call
        self.on_request = on_request

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        last = request.messages[-1]
        if self.on_request is not None:
            self.on_request(last)
        if isinstance(last, UserMessage) and last.text == "go":
            yield ResponseCompletedEvent(AssistantMessage("", (self.call,)))
        else:
            yield ResponseCompletedEvent(AssistantMessage("done"))


class Deltas:
    """Streams ``deltas`` text pieces without awaiting between them, then its message.

    With ``latency`` it sleeps that long first. It asks for one ``noop`` call
    while the request holds fewer than ``tool_turns`` tool results, then answers.
    """

    def __init__(self, deltas: int, latency: float = 0.0, tool_turns: int = 0) -> None:
        self.deltas = deltas
        self.latency = latency
        self.tool_turns = tool_turns

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if self.latency:
            await trio.sleep(self.latency)
        for _ in range(self.deltas):
            yield TextDeltaEvent(PIECE)
        done = sum(isinstance(message, ToolMessage) for message in request.messages)
        if done < self.tool_turns:
            yield ResponseCompletedEvent(AssistantMessage("", (ToolCall(f"call-{done}", "noop", {}),)))
        else:
            yield ResponseCompletedEvent(AssistantMessage("done"))


# per-turn overhead ------------------------------------------------------------


def turns(turns: int, repeats: int, mode: str = "run") -> dict[str, Any]:
    script = [AssistantMessage("", (ToolCall(f"call-{i}", "noop", {}),)) for i in range(turns)]
    script.append(AssistantMessage("done"))

    if mode not in ("run", "stream", "bare"):
        raise Unavailable(f"no {mode} mode")

    async def request(client: AgentClient, config: AgentRunConfig) -> None:
        if mode in ("run", "bare"):
            await client.run("go", config=config)
            return
        async with client.stream("go", config=config) as stream:
            async for _ in stream:
                pass

    async def main() -> dict[str, Any]:
        model = Script()
        history: dict[str, Any] = {"history": None} if mode == "bare" else {}
        client = await create_agent(model, tools=[noop], max_iterations=turns + 1, **history)
        model.load([AssistantMessage("done")])
        await request(client, AgentRunConfig(session_id="no-turns"))
        fixed = len(client.transitions("no-turns"))
        seconds: list[float] = []
        for repeat in range(repeats + 1):
            model.load(script)
            started = time.perf_counter()
            await request(client, AgentRunConfig(session_id=f"s{repeat}"))
            if repeat:
                seconds.append(time.perf_counter() - started)
        edges = (len(client.transitions(f"s{repeats}")) - fixed) / turns
        return {"turns": turns, "mode": mode, "seconds": seconds, "edges_per_turn": edges}

    result: dict[str, Any] = trio.run(main)
    return result


# concurrency ------------------------------------------------------------------


class Approval(AgentExtension):
    """Pauses the guarded tool in before_tool until an approval_response arrives."""

    def __init__(self) -> None:
        self.router = ResponseRouter()

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        if call.name != GUARDED_TOOL:
            return
        await context.emit(ExtensionEvent(name=APPROVAL_REQUESTED, payload={"tool_call_id": call.id}))
        await self.router.wait(context, call.id, response_event=APPROVAL_RESPONSE, validate=require_bool("approved"))

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        return self.router.accept(config, event)


def _plan_mode() -> AgentExtension:
    try:
        module = importlib.import_module("orchestrator.extensions.plan_mode")
    except ModuleNotFoundError:
        raise Unavailable("orchestrator.extensions.plan_mode does not exist yet") from None
    extension: AgentExtension = module.PlanModeExtension()
    return extension


def sessions(count: int, trace: bool, extension: str = "approval") -> dict[str, Any]:
    if extension == "approval":
        installed: AgentExtension = Approval()
        call = ToolCall(CALL_ID, GUARDED_TOOL, {})
        requested, response = APPROVAL_REQUESTED, APPROVAL_RESPONSE
    elif extension == "plan_mode":
        installed = _plan_mode()
        call = ToolCall(CALL_ID, "enter_plan_mode", {"reason": "benchmark"})
        requested, response = "enter_plan_mode", "enter_plan_mode_response"
    else:
        raise Unavailable(f"no {extension} variant")
    probe = MemoryProbe(trace)

    async def main() -> dict[str, Any]:
        client = await create_agent(Responder(call), tools=[guarded], extensions=[installed])
        await client.run("warm up", config=AgentRunConfig(session_id="warm-up"))
        waiting = 0
        all_waiting = trio.Event()

        async def session(index: int) -> None:
            nonlocal waiting
            async with client.stream("go", config=AgentRunConfig(session_id=f"s{index}")) as stream:
                async for event in stream:
                    if event.name == requested:
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
        async with trio.open_nursery() as nursery:
            for index in range(count):
                nursery.start_soon(session, index)
            await all_waiting.wait()
            filled = time.perf_counter()
            probe.waiting()
            approving = time.perf_counter()
            accepted = sum(approve(index) for index in range(count))
        drained = time.perf_counter()
        probe.stop()
        return session_figures(probe, count, filled - started, drained - approving, accepted=accepted)

    result: dict[str, Any] = trio.run(main)
    return result


# streaming --------------------------------------------------------------------


def streaming(deltas: int, repeats: int, slow: bool = False, pause: float = 0.2) -> dict[str, Any]:
    """One model call streaming ``deltas`` pieces; a consumer reads every event of the request.

    Fast: seconds per request (``repeats`` times, after a warm-up). Slow: the
    consumer reads the first event, then sleeps ``pause`` seconds before it reads
    the rest; the peak of traced memory above the start is reported.
    """

    async def consume(client: AgentClient, session: str, wait: float) -> int:
        seen = 0
        async with client.stream("go", config=AgentRunConfig(session_id=session)) as stream:
            async for event in stream:
                if wait:
                    await trio.sleep(wait)
                    wait = 0.0
                if isinstance(event, StreamedDelta):
                    seen += 1
        return seen

    async def main() -> dict[str, Any]:
        client = await create_agent(Deltas(deltas))
        await consume(client, "warm-up", 0.0)
        if slow:
            with PeakMemory() as memory:
                seen = await consume(client, "slow", pause)
            return streaming_figures(deltas, [], seen, memory.peak)
        seconds: list[float] = []
        for repeat in range(repeats):
            started = time.perf_counter()
            seen = await consume(client, f"s{repeat}", 0.0)
            seconds.append(time.perf_counter() - started)
        return streaming_figures(deltas, seconds, seen)

    result: dict[str, Any] = trio.run(main)
    return result


# many concurrent sessions -----------------------------------------------------


def concurrent(sessions: int, tool_turns: int, latency: float, deltas: int) -> dict[str, Any]:
    """``sessions`` requests at once, each ``tool_turns`` tool turns then an answer, every event consumed."""

    async def main() -> dict[str, Any]:
        client = await create_agent(Deltas(deltas, latency, tool_turns), tools=[noop])
        seen = 0

        async def session(name: str) -> None:
            nonlocal seen
            async with client.stream("go", config=AgentRunConfig(session_id=name)) as stream:
                async for event in stream:
                    if isinstance(event, StreamedDelta):
                        seen += 1

        await session("warm-up")
        seen = 0
        with CpuClock() as clock:
            async with trio.open_nursery() as nursery:
                for index in range(sessions):
                    nursery.start_soon(session, f"s{index}")
        return concurrency_figures(clock, sessions, sessions * (tool_turns + 1), seen)

    result: dict[str, Any] = trio.run(main)
    return result


# steering latency -------------------------------------------------------------


def _steering_extension() -> AgentExtension:
    try:
        module = importlib.import_module("orchestrator.extensions.steering")
    except ModuleNotFoundError:
        raise Unavailable("orchestrator.extensions.steering does not exist yet") from None
    extension: AgentExtension = module.SteeringExtension()
    return extension


def steering(runs: int) -> dict[str, Any]:
    extension = _steering_extension()
    emitter = Emitter()
    seen: dict[str, float] = {}
    current = {"index": 0}
    clients: list[AgentClient] = []

    def note(last: Message) -> None:
        if isinstance(last, UserMessage) and last.text.startswith("steer "):
            seen[last.text] = time.perf_counter()

    def emit(index: int, text: str) -> bool:
        event = ExternalEvent("steering_message", {"content": text})
        return bool(clients[0].agent.emit_external_event(event, config=AgentRunConfig(session_id=f"s{index}")))

    @tool
    async def work() -> str:
        """Run until the steering message was sent from the other thread."""
        index = current["index"]
        text = steering_text(index)
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()
        emitter.submit(text, lambda: emit(index, text), lambda: token.run_sync_soon(done.set))
        await done.wait()
        return "ok"

    async def main() -> None:
        model = Responder(ToolCall(CALL_ID, "work", {}), note)
        clients.append(await create_agent(model, tools=[work], extensions=[extension]))
        for index in range(runs):
            current["index"] = index
            await clients[0].run("go", config=AgentRunConfig(session_id=f"s{index}"))

    try:
        trio.run(main)
    finally:
        emitter.close()
    return latency_result(emitter, seen, runs)

"""The floor: a hand-written trio loop that makes the same model and tool calls.

No framework: plain slotted dataclasses for messages, one function for the
loop. It keeps the conversation, builds a request per model call, streams the
model, runs each tool call and, where a workload needs it, waits for an
approval or takes a steering message after a tool returns.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from bench.drivers.common import (
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


@dataclass(frozen=True, slots=True)
class Call:
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str = ""
    tool_calls: tuple[Call, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class Completed:
    message: Message


@dataclass(frozen=True, slots=True)
class Delta:
    text: str


Request = tuple[tuple[Message, ...], tuple[str, ...]]
Tool = Callable[..., Awaitable[str]]


class Inbox:
    """Steering messages per session, safe to fill from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: dict[str, deque[str]] = {}

    def open(self, session: str) -> None:
        with self._lock:
            self._messages[session] = deque()

    def close(self, session: str) -> None:
        with self._lock:
            self._messages.pop(session, None)

    def put(self, session: str, text: str) -> bool:
        with self._lock:
            queued = self._messages.get(session)
            if queued is None:
                return False
            queued.append(text)
            return True

    def take(self, session: str) -> str | None:
        with self._lock:
            queued = self._messages.get(session)
            return queued.popleft() if queued else None


class Script:
    """Plays prepared assistant messages in order, with no latency."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.index = 0

    def load(self, messages: list[Message]) -> None:
        self.messages, self.index = messages, 0

    async def stream(self, request: Request) -> AsyncIterator[Completed]:
        message = self.messages[self.index]
        self.index += 1
        yield Completed(message)


class Responder:
    """Answers from the last message of the request: a tool call first, then done."""

    def __init__(self, tool: str, on_request: Callable[[Message], None] | None = None) -> None:
        self.tool = tool
        self.on_request = on_request

    async def stream(self, request: Request) -> AsyncIterator[Completed]:
        last = request[0][-1]
        if self.on_request is not None:
            self.on_request(last)
        if last.role == "user" and last.content == "go":
            yield Completed(Message("assistant", tool_calls=(Call(CALL_ID, self.tool),)))
        else:
            yield Completed(Message("assistant", "done"))


class Deltas:
    """Streams ``deltas`` pieces without awaiting, then a tool call while fewer than ``tool_turns`` results."""

    def __init__(self, deltas: int, latency: float = 0.0, tool_turns: int = 0) -> None:
        self.deltas = deltas
        self.latency = latency
        self.tool_turns = tool_turns

    async def stream(self, request: Request) -> AsyncIterator[Delta | Completed]:
        if self.latency:
            await trio.sleep(self.latency)
        for _ in range(self.deltas):
            yield Delta(PIECE)
        done = sum(message.role == "tool" for message in request[0])
        if done < self.tool_turns:
            yield Completed(Message("assistant", tool_calls=(Call(f"call-{done}", "noop"),)))
        else:
            yield Completed(Message("assistant", "done"))


Model = Script | Responder


async def stream_loop(model: Deltas, tools: dict[str, Tool], text: str) -> AsyncIterator[Delta | Message]:
    """The loop as an async generator: the consumer pulls each delta through it, then the answer.

    Nothing is queued: the model produces a delta only when the consumer asks for
    the next one, so a slow consumer holds no more than one delta.
    """
    messages = [Message("user", text)]
    names = tuple(tools)
    while True:
        response: Message | None = None
        async for event in model.stream((tuple(messages), names)):
            if isinstance(event, Delta):
                yield event
            else:
                response = event.message
        assert response is not None
        messages.append(response)
        if not response.tool_calls:
            yield response
            return
        for call in response.tool_calls:
            content = await tools[call.name](**call.arguments)
            messages.append(Message("tool", content, tool_call_id=call.id))


async def run_loop(
    model: Model,
    tools: dict[str, Tool],
    text: str,
    session: str = "s",
    before_tool: Callable[[str, Call], Awaitable[None]] | None = None,
    inbox: Inbox | None = None,
) -> Message:
    """One request: model, tools, repeat until an answer without tool calls."""
    messages = [Message("user", text)]
    names = tuple(tools)
    if inbox is not None:
        inbox.open(session)
    try:
        while True:
            response: Message | None = None
            async for event in model.stream((tuple(messages), names)):
                response = event.message
            assert response is not None
            messages.append(response)
            if not response.tool_calls:
                return response
            for call in response.tool_calls:
                if before_tool is not None:
                    await before_tool(session, call)
                content = await tools[call.name](**call.arguments)
                messages.append(Message("tool", content, tool_call_id=call.id))
            steering = inbox.take(session) if inbox is not None else None
            if steering is not None:
                messages.append(Message("user", steering))
    finally:
        if inbox is not None:
            inbox.close(session)


async def _noop() -> str:
    return "ok"


# per-turn overhead ------------------------------------------------------------


def turns(turns: int, repeats: int, mode: str = "run") -> dict[str, Any]:
    script = [Message("assistant", tool_calls=(Call(f"call-{i}", "noop"),)) for i in range(turns)]
    script.append(Message("assistant", "done"))

    async def main() -> list[float]:
        model = Script()
        seconds: list[float] = []
        for repeat in range(repeats + 1):
            model.load(script)
            started = time.perf_counter()
            await run_loop(model, {"noop": _noop}, "go")
            if repeat:
                seconds.append(time.perf_counter() - started)
        return seconds

    return {"turns": turns, "seconds": trio.run(main)}


# concurrency ------------------------------------------------------------------


def sessions(count: int, trace: bool, extension: str = "approval") -> dict[str, Any]:
    if extension != "approval":
        from bench.drivers import Unavailable

        raise Unavailable(f"the raw loop has no {extension} variant")
    probe = MemoryProbe(trace)

    async def main() -> dict[str, Any]:
        waits: dict[tuple[str, str], trio.Event] = {}
        lock = threading.Lock()
        requested = 0
        all_waiting = trio.Event()
        token = trio.lowlevel.current_trio_token()

        async def approval(session: str, call: Call) -> None:
            nonlocal requested
            if call.name != GUARDED_TOOL:
                return
            woken = trio.Event()
            with lock:
                waits[(session, call.id)] = woken
            requested += 1
            if requested == count:
                all_waiting.set()
            await woken.wait()

        def approve(session: str, call_id: str) -> bool:
            with lock:
                woken = waits.pop((session, call_id), None)
            if woken is None:
                return False
            token.run_sync_soon(woken.set)
            return True

        model = Responder(GUARDED_TOOL)
        tools: dict[str, Tool] = {GUARDED_TOOL: _noop}

        async def session(name: str) -> None:
            await run_loop(model, tools, "go", name, approval)

        probe.start()
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for index in range(count):
                nursery.start_soon(session, f"s{index}")
            await all_waiting.wait()
            filled = time.perf_counter()
            probe.waiting()
            approving = time.perf_counter()
            accepted = sum(approve(f"s{index}", CALL_ID) for index in range(count))
        drained = time.perf_counter()
        probe.stop()
        return session_figures(probe, count, filled - started, drained - approving, accepted=accepted)

    result: dict[str, Any] = trio.run(main)
    return result


# streaming --------------------------------------------------------------------


async def _consume(model: Deltas, wait: float) -> int:
    seen = 0
    async for event in stream_loop(model, {"noop": _noop}, "go"):
        if wait:
            await trio.sleep(wait)
            wait = 0.0
        if isinstance(event, Delta):
            seen += 1
    return seen


def streaming(deltas: int, repeats: int, slow: bool = False, pause: float = 0.2) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        model = Deltas(deltas)
        await _consume(model, 0.0)
        if slow:
            with PeakMemory() as memory:
                seen = await _consume(model, pause)
            return streaming_figures(deltas, [], seen, memory.peak)
        seconds: list[float] = []
        for _ in range(repeats):
            started = time.perf_counter()
            seen = await _consume(model, 0.0)
            seconds.append(time.perf_counter() - started)
        return streaming_figures(deltas, seconds, seen)

    result: dict[str, Any] = trio.run(main)
    return result


# many concurrent sessions -----------------------------------------------------


def concurrent(sessions: int, tool_turns: int, latency: float, deltas: int) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        model = Deltas(deltas, latency, tool_turns)
        seen = 0

        async def session() -> None:
            nonlocal seen
            count = await _consume(model, 0.0)
            seen += count

        await session()
        seen = 0
        with CpuClock() as clock:
            async with trio.open_nursery() as nursery:
                for _ in range(sessions):
                    nursery.start_soon(session)
        return concurrency_figures(clock, sessions, sessions * (tool_turns + 1), seen)

    result: dict[str, Any] = trio.run(main)
    return result


# steering latency -------------------------------------------------------------


def steering(runs: int) -> dict[str, Any]:
    inbox = Inbox()
    emitter = Emitter()
    seen: dict[str, float] = {}
    current = {"index": 0}

    def note(last: Message) -> None:
        if last.role == "user" and last.content.startswith("steer "):
            seen[last.content] = time.perf_counter()

    async def work() -> str:
        index = current["index"]
        text = steering_text(index)
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()
        emitter.submit(text, lambda: inbox.put(f"s{index}", text), lambda: token.run_sync_soon(done.set))
        await done.wait()
        return "ok"

    async def main() -> None:
        model = Responder("work", note)
        for index in range(runs):
            current["index"] = index
            await run_loop(model, {"work": work}, "go", f"s{index}", inbox=inbox)

    try:
        trio.run(main)
    finally:
        emitter.close()
    return latency_result(emitter, seen, runs)

"""RunStream: the async iterator of one request's events.

The request runs in its own trio system task and sends events through an
unbounded memory channel, so the consumer may act on an event (for example
answer an approval) while the request waits. Cancelling the consumer while it
waits for the next event, closing the stream, or dropping it cancels the
request, which then settles every open tool call before it ends.
"""

from __future__ import annotations

import contextlib
import math
from types import TracebackType
from typing import TYPE_CHECKING

import trio

from orchestrator.config import AgentRunConfig
from orchestrator.events import AgentEvent
from orchestrator.messages import AssistantMessage, UserMessage

if TYPE_CHECKING:
    from orchestrator.agent import Agent
    from orchestrator.runtime import RequestRun


class RunStream:
    """Iterate with ``async for``; use ``async with`` to close it deterministically."""

    def __init__(self, agent: Agent, config: AgentRunConfig, message: UserMessage) -> None:
        self._agent = agent
        self._config = config
        self._message = message
        self._receive: trio.MemoryReceiveChannel[AgentEvent] | None = None
        self._scope = trio.CancelScope()
        self._done = trio.Event()
        self._raised = False
        self.run: RequestRun | None = None
        self.result: AssistantMessage | None = None
        self.error: BaseException | None = None

    def _start(self) -> trio.MemoryReceiveChannel[AgentEvent]:
        send, receive = trio.open_memory_channel[AgentEvent](math.inf)
        self.run = self._agent._open_run(self._config, self._message, send.send_nowait)
        self._receive = receive
        trio.lowlevel.spawn_system_task(self._drive, self.run, send, name=f"request {self.run.context.request_id}")
        return receive

    async def _drive(self, run: RequestRun, send: trio.MemorySendChannel[AgentEvent]) -> None:
        try:
            with self._scope:
                self.result = await run.run()
        except Exception as error:
            self.error = error
        finally:
            self._agent._close_run(run)
            send.close()
            self._done.set()

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> AgentEvent:
        receive = self._receive if self._receive is not None else self._start()
        try:
            return await receive.receive()
        except trio.EndOfChannel:
            if self.error is not None and not self._raised:
                self._raised = True
                raise self.error from None
            raise StopAsyncIteration from None
        except trio.Cancelled:
            await self._abort()
            raise

    async def _abort(self) -> None:
        self._scope.cancel()
        with trio.CancelScope(shield=True):
            await self._done.wait()

    async def aclose(self) -> None:
        """Cancel the request if it still runs and wait until it has ended."""
        if self.run is not None and not self._done.is_set():
            await self._abort()

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if self.run is not None and not self._done.is_set():
            with contextlib.suppress(RuntimeError):
                self._scope.cancel()

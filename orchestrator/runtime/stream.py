"""RunStream: the async iterator of one request's events.

The request runs in its own trio system task and sends events through a
bounded memory channel (``STREAM_BUFFER`` events, see ``orchestrator.runtime.sinks``),
so the consumer may act on an event (for example answer an approval) while the
request waits, and a request that runs ahead of a slow consumer waits for it
instead of queueing events without limit. Cancelling the consumer while it
waits for the next event, closing the stream, or dropping it cancels the
request, which then settles every open tool call before it ends. A dropped
stream (``break`` out of ``async for``, an exception in its body) cannot wait
for that end; its request keeps the session until it has ended, and the next
request of that session waits for it instead of failing with SessionBusy.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

import trio

from orchestrator.config import AgentRunConfig
from orchestrator.events import AgentEvent
from orchestrator.messages import AssistantMessage, UserMessage
from orchestrator.runtime.run import _only_cancellation
from orchestrator.runtime.sinks import StreamQueue

if TYPE_CHECKING:
    from orchestrator.runtime.ports import RunOpener, RunPort


#: An event that is ready is returned without a schedule point; whether the consumer was
#: cancelled is checked on the first event and then on every CHECK_EVERY_EVENTS-th (waiting
#: for an event always is a checkpoint). A cancelled consumer therefore reads at most that
#: many more queued events before the stream raises Cancelled and cancels the request.
CHECK_EVERY_EVENTS = 16


class _Outcome:
    """What the request task and the stream share; the task never holds the stream.

    ``finished`` is set once the request has ended; ``wait`` waits for that. The
    trio.Event behind ``wait`` is made for the first waiter only (most requests
    end before anyone waits for them).
    """

    __slots__ = ("_done", "error", "finished", "result", "run", "scope")

    def __init__(self, run: RunPort) -> None:
        self.run: RunPort | None = run
        self.scope = trio.CancelScope()
        self.finished = False
        self._done: trio.Event | None = None
        self.result: AssistantMessage | None = None
        self.error: BaseException | None = None

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()

    async def wait(self) -> None:
        """Wait until the request has ended (a checkpoint when it has)."""
        if self.finished:
            await trio.lowlevel.checkpoint()
            return
        if self._done is None:
            self._done = trio.Event()
        await self._done.wait()


async def _drive(agent: RunOpener, outcome: _Outcome, on_end: Callable[[], None]) -> None:
    """Run the request; its error, whatever its kind, is handed to the consumer.

    ``on_end`` runs once the request has left its session, before the outcome is finished.

    A system task must not raise: trio would turn a KeyboardInterrupt-like
    exception from a tool into TrioInternalError and end the whole run. Only a
    cancellation from outside (the run shutting down) goes on.
    """
    run = outcome.run
    assert run is not None
    try:
        with outcome.scope:
            outcome.result = await run.run()
    except BaseException as error:
        if _only_cancellation(error):
            raise
        outcome.error = error
    finally:
        agent._close_run(run)
        on_end()
        outcome.finish()


class RunStream:
    """Iterate with ``async for``; use ``async with`` to close it deterministically."""

    def __init__(self, agent: RunOpener, config: AgentRunConfig, message: UserMessage) -> None:
        self._agent = agent
        self._config = config
        self._message = message
        self._queue: StreamQueue | None = None
        self._outcome: _Outcome | None = None
        self._raised = False
        # Events returned since the consumer's cancellation was last checked.
        self._unchecked = CHECK_EVERY_EVENTS

    @property
    def run(self) -> RunPort | None:
        return self._outcome.run if self._outcome else None

    @property
    def result(self) -> AssistantMessage | None:
        return self._outcome.result if self._outcome else None

    @property
    def error(self) -> BaseException | None:
        return self._outcome.error if self._outcome else None

    async def _start(self) -> StreamQueue:
        queue = StreamQueue()
        run = await self._agent._open_run(self._config, self._message, queue)
        self._outcome = _Outcome(run)
        self._queue = queue
        trio.lowlevel.spawn_system_task(
            _drive,
            self._agent,
            self._outcome,
            queue.close,
            name=f"request {run.context.request_id}",
            context=contextvars.copy_context(),  # the caller's: a span it opened is the parent of the request's
        )
        return queue

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> AgentEvent:
        receive = self._queue if self._queue is not None else await self._start()
        try:
            self._unchecked += 1
            if self._unchecked >= CHECK_EVERY_EVENTS:
                self._unchecked = 0
                await trio.lowlevel.checkpoint_if_cancelled()
            event = receive.take_ready()
            if event is not None:
                return event
            return await receive.receive()
        except trio.EndOfChannel:
            if self.error is not None and not self._raised:
                self._raised = True
                raise self.error from None
            raise StopAsyncIteration from None
        except trio.Cancelled:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Cancel the request if it still runs and wait until it has ended."""
        outcome = self._outcome
        if outcome is not None and not outcome.finished:
            assert self._queue is not None
            # Cancel first: a request waiting for room then sees the cancellation, not the room.
            outcome.scope.cancel()
            self._queue.unbound()
            with trio.CancelScope(shield=True):
                await outcome.wait()

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
        outcome = self._outcome
        if outcome is not None and outcome.run is not None and not outcome.finished:
            outcome.run.abandoned = True
            with contextlib.suppress(RuntimeError):
                outcome.scope.cancel()
                if self._queue is not None:
                    self._queue.abandon()

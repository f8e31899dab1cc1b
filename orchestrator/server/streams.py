"""The response of an event stream, and how it learns that it must end before its run does.

A stream ends with its run's terminal event. It ends early, with a last
``event: closing`` frame saying why, when the server shuts down (uvicorn's
Ctrl-C or SIGTERM) or the backend stops (an ``AgentHost`` closing): within a
second, so that a server never waits on a reader of a run that waits for an
answer. The run is not cancelled by that; a reader reconnects with
``Last-Event-ID`` and misses nothing. A reader that disconnects only stops
reading.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from orchestrator.events import AgentEvent, RunCancelledEvent, RunCompletedEvent, RunFailedEvent
from orchestrator.host import AgentHost, HostBatches
from orchestrator.runtime.handle import EventsExpired
from orchestrator.server.hosted import host_closing
from orchestrator.wire.format import encode_event
from orchestrator.wire.sse import CLOSING_EVENT, sse_closing_frame, sse_error_frame, sse_frames

__all__ = ["CLOSING_EVENT", "EventStreamResponse", "StreamStops", "asgi_server_stopping", "sse_response"]

logger = logging.getLogger(__name__)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

CLOSING_POLL_SECONDS = 0.25
"""How often an open stream asks whether it must end (so it ends within a second of a shutdown)."""

StopReason = Callable[[], "str | None"]
"""Why open streams must end now, or None while they may go on."""


def asgi_server_stopping() -> str | None:
    """The serving process's ASGI server is shutting down (uvicorn, seen through the signal handlers it installs).

    uvicorn installs them when it runs in the main thread, as its command does. Every open stream asks this
    four times a second, so it reads the handlers as they are stored (``signal.getsignal`` turns each into an
    enum member, or fails to at the cost of an exception) and remembers which classes are uvicorn's.
    """
    for number in _STOP_SIGNALS:
        owner = getattr(_raw_handler(number), "__self__", None)
        if owner is None or not _is_uvicorns(type(owner)):
            continue
        if getattr(owner, "should_exit", False) or getattr(owner, "force_exit", False):
            return "the server is shutting down"
    return None


_STOP_SIGNALS = (int(signal.SIGINT), int(signal.SIGTERM))
#: ``signal.getsignal`` without its conversion to enum members (``_signal`` is the module ``signal`` wraps).
_raw_handler: Callable[[int], object] = getattr(sys.modules.get("_signal"), "getsignal", signal.getsignal)


_UVICORNS: dict[type, bool] = {}


def _is_uvicorns(kind: type) -> bool:
    """Whether ``kind`` or a class it derives from is defined in uvicorn."""
    found = _UVICORNS.get(kind)
    if found is None:
        found = _UVICORNS[kind] = any(base.__module__.startswith("uvicorn") for base in kind.__mro__)
    return found


def first_reason(reasons: Iterable[StopReason]) -> str | None:
    for reason in reasons:
        found = reason()
        if found is not None:
            return found
    return None


class EventStreamResponse(Response):
    """SSE frames of a run's event batches, ending after the terminal event, or early with ``event: closing``."""

    media_type = "text/event-stream"

    def __init__(
        self,
        batches: AsyncIterator[list[dict[str, Any]]],
        stop: StopReason,
        request_id: str | None = None,
        stops: StreamStops | None = None,
    ) -> None:
        """``request_id``, when given, is the run whose terminal event ends the stream: its chunk goes with the
        body's end (one write fewer than an empty last chunk). ``stops``, when given, asks ``stop`` for this
        stream with the others while it runs."""
        super().__init__(headers=SSE_HEADERS, media_type=self.media_type)
        self.raw_headers = [(name, value) for name, value in self.raw_headers if name != b"content-length"]
        self.batches = batches
        self.stop = stop
        self.request_id = request_id
        self.stops = stops

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        frames = _Frames(self.batches, self.stop, self.request_id)

        async def finish(end: StreamEnd) -> None:
            await self._close(frames)
            with anyio.move_on_after(1), _suppress_os_error():
                await send({"type": "http.response.body", "body": end.tail, "more_body": False})

        end = await stream_frames(receive, send, frames, self.stop, frames.is_last, self.stops, finish)
        if end.finished:
            return
        await self._close(frames)
        if end.gone:
            return
        with anyio.move_on_after(1), _suppress_os_error():
            tail = sse_closing_frame(end.reason).encode() if end.reason is not None and not end.ended else end.tail
            await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _close(self, frames: _Frames) -> None:
        """Stop reading the run's batches (within a second, whatever cancels the response): a host's batches stop
        at once, others are closed."""
        frames.close()
        if isinstance(self.batches, HostBatches):
            self.batches.stop()
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            aclose = getattr(self.batches, "aclose", None)
            if aclose is not None:
                await aclose()


class StreamEnd:
    """How a streamed response's frames ended: the reader went away (``gone``), they ran out (``ended``), or the
    server stopped them (``reason``, from its StopReason)."""

    __slots__ = ("ended", "finished", "finishing", "gone", "reason", "tail", "watching")

    def __init__(self) -> None:
        self.gone = False
        self.ended = False
        self.reason: str | None = None
        self.tail = b""
        """The last frame, not sent: it goes with the body's end."""
        self.finishing = False
        """The frames ran out and the body's end is being sent: neither a disconnect nor a stop ends it now."""
        self.finished = False
        """``finish`` sent the body's end."""
        self.watching = True
        """The watcher has not returned yet."""


async def stream_frames(
    receive: Receive,
    send: Send,
    frames: AsyncIterator[bytes],
    stop: StopReason | None = None,
    is_last: Callable[[], bool] | None = None,
    stops: StreamStops | None = None,
    finish: Callable[[StreamEnd], Awaitable[None]] | None = None,
) -> StreamEnd:
    """Send ``frames`` as body chunks until they run out, the reader disconnects (a send that fails counts as
    that), or ``stop()`` gives a reason (asked every CLOSING_POLL_SECONDS); the caller sends the last chunk:
    the frame ``is_last()`` said was the last one, kept unsent as ``tail`` to go with the body's end.

    The frames are sent from the calling task; one watcher beside it listens for the disconnect and asks ``stop``
    (or, while ``stops`` runs on this thread, leaves the asking to it: ``stops.stop`` must then be ``stop``).
    ``finish``, when given, sends the body's end itself once the frames ran out (``end.finished``), while the
    watcher still listens: a server that reports the response complete to a waiting ``receive`` (as uvicorn
    does) lets the watcher end by itself instead of being cancelled.
    """
    end = StreamEnd()
    async with anyio.create_task_group() as group:
        group.start_soon(_watch, receive, stop, end, group.cancel_scope, stops)
        try:
            async for frame in frames:
                if is_last is not None and is_last():
                    end.tail = frame
                    break
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            end.ended = True
        except OSError:  # the reader is gone; the run goes on
            end.gone = True
        if finish is not None and end.ended and not end.gone and end.reason is None:
            end.finishing = True
            await finish(end)
            end.finished = True
            for _ in range(2):  # the watcher's receive may just have learnt that the response is complete
                if not end.watching:
                    break
                await anyio.lowlevel.checkpoint()
        if end.watching:
            group.cancel_scope.cancel()
    return end


async def _watch(
    receive: Receive,
    stop: StopReason | None,
    end: StreamEnd,
    scope: anyio.CancelScope,
    stops: StreamStops | None = None,
) -> None:
    """Until the reader disconnects (``end.gone``) or ``stop()`` gives a reason (``end.reason``), then end the
    stream: waits for the disconnect, asking ``stop`` every CLOSING_POLL_SECONDS in between (unless ``stops``
    asks it for every stream; when ``stops`` ends first, this watcher asks for itself again). Once the stream
    is finishing, the disconnect that ends its response ends the watcher and nothing else."""
    try:
        await _wait_for_end(receive, stop, end, scope, stops)
    finally:
        end.watching = False


async def _wait_for_end(
    receive: Receive,
    stop: StopReason | None,
    end: StreamEnd,
    scope: anyio.CancelScope,
    stops: StreamStops | None,
) -> None:
    if stops is not None and stops.serves_here():
        watched = _Watched(end, scope)
        with anyio.CancelScope() as watched.waiting:
            stops.open.add(watched)
            try:
                await _until_disconnect(receive, end, scope)
                return
            finally:
                stops.open.discard(watched)
    poll = math.inf if stop is None else CLOSING_POLL_SECONDS
    while stop is None or end.finishing or (reason := stop()) is None:
        with anyio.move_on_after(poll):
            await _until_disconnect(receive, end, scope)
            return
    end.reason = reason
    scope.cancel()


async def _until_disconnect(receive: Receive, end: StreamEnd, scope: anyio.CancelScope) -> None:
    """Until the client disconnects; a stream that was not finishing is then gone, and its ``scope`` cancelled."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if not end.finishing:
        end.gone = True
        scope.cancel()


class _Watched:
    """An open stream, as ``StreamStops`` ends it (``scope``) or hands its asking back to it (``waiting``)."""

    __slots__ = ("end", "scope", "waiting")

    def __init__(self, end: StreamEnd, scope: anyio.CancelScope) -> None:
        self.end = end
        self.scope = scope
        self.waiting: anyio.CancelScope | None = None


class StreamStops:
    """Asks ``stop`` every CLOSING_POLL_SECONDS for all the open streams of an app at once, and ends them with its
    reason, while ``run`` runs (in the app's lifespan): one timer for them all instead of one each. Streams
    opened while it does not run, or on another thread's loop, ask for themselves; those it watches when it
    ends go back to asking for themselves."""

    def __init__(self, stop: StopReason) -> None:
        self.stop = stop
        self.open: set[_Watched] = set()
        self._thread: int | None = None

    def serves_here(self) -> bool:
        """Whether it runs, on this thread's loop (only there may it end a stream)."""
        return self._thread is not None and self._thread == threading.get_ident()

    async def run(self) -> None:
        """Ask until cancelled (a second ``run`` while one runs leaves the asking to the first)."""
        if self._thread is not None:
            await anyio.sleep_forever()
        self._thread = threading.get_ident()
        try:
            while True:
                await anyio.sleep(CLOSING_POLL_SECONDS)
                if self.open and (reason := self.stop()) is not None:
                    for watched in list(self.open):
                        if not watched.end.finishing:
                            watched.end.reason = reason
                            watched.scope.cancel()
        finally:
            self._thread = None
            for watched in list(self.open):
                if watched.waiting is not None:
                    watched.waiting.cancel()


class _suppress_os_error:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        return kind is not None and issubclass(kind, OSError)


RUN_ENDS = frozenset({RunCompletedEvent.kind, RunFailedEvent.kind, RunCancelledEvent.kind})
"""The events that end a run's stream: its own last event is one of them."""


class _Frames:
    """SSE frames of a run's events, a batch (as many as are ready) per chunk; ends after the terminal event.

    A stream that cannot reach it (its reader fell behind the retained events,
    or the backend failed) ends with an error frame instead of a cut response;
    one whose backend is closing ends with the closing frame. ``is_last()`` says
    whether the chunk just given is the stream's last: the run ``request_id``'s own
    terminal event ends it (a subagent's, streamed through it, does not), as does
    an error or closing frame. A plain iterator, not a generator: leaving it early
    leaves nothing to close.
    """

    def __init__(self, batches: AsyncIterator[list[dict[str, Any]]], stop: StopReason, request_id: str | None) -> None:
        self.batches = batches
        self.stop = stop
        self.request_id = request_id
        self.last = False
        self._done = False

    def __aiter__(self) -> _Frames:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        try:
            batch = await self.batches.__anext__()
            final = batch[-1]
            self.last = self.request_id is not None and final["type"] in RUN_ENDS and final.get(
                "request_id"
            ) == self.request_id
            return sse_frames(batch)
        except StopAsyncIteration:
            self._done = True
            raise
        except EventsExpired as expired:
            frame = sse_error_frame(expired)
        except Exception as error:
            reason = self.stop()
            if reason is not None:
                frame = sse_closing_frame(reason)
            else:
                logger.exception("the event stream failed")
                frame = sse_error_frame(error)
        self._done = True
        self.last = True
        return frame.encode()

    def close(self) -> None:
        self._done = True

    def is_last(self) -> bool:
        return self.last


def sse_response(events: AsyncIterator[AgentEvent], host: AgentHost | None = None) -> Response:
    """A Server-Sent Events response of ``events`` (such as ``await host.follow(request_id, after=seq)``).

    Each event is a frame (``sse_frame``). The response ends after the run's last
    event, or early with an ``event: closing`` frame when the ASGI server shuts
    down or ``host`` closes; a reader that disconnects only stops reading.
    """

    def stop() -> str | None:
        return (host_closing(host) if host is not None else None) or asgi_server_stopping()

    return EventStreamResponse(_single_batches(events), stop)


async def _single_batches(events: AsyncIterator[AgentEvent]) -> AsyncIterator[list[dict[str, Any]]]:
    async for event in events:
        yield [encode_event(event)]

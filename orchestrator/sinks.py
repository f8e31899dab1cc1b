"""Where a request's streamed events go: the one interface between emitting and consuming.

The runtime stamps an event, then offers it to the request's sink; only when
the sink has no room (``offer`` returns False) does the request await ``put``.
A sink that never refuses (a retained event log, the drop sink) therefore
costs one method call per event, and a bounded channel makes the request wait
for its consumer instead of queueing without limit.
"""

from __future__ import annotations

import collections
from typing import Protocol

import trio

from orchestrator.events import AgentEvent

STREAM_BUFFER = 128
"""Events a ``client.stream`` request may run ahead of its consumer before it waits."""


class EventSink(Protocol):
    """Takes the events one request streams, in order."""

    def offer(self, event: AgentEvent) -> bool:
        """Take ``event`` now; False when there is no room (then ``put`` is awaited)."""
        ...

    async def put(self, event: AgentEvent) -> None:
        """Take ``event``, waiting for room."""
        ...


class DropSink:
    """Takes every event and keeps none (a request whose events reach only its extensions)."""

    def offer(self, event: AgentEvent) -> bool:
        return True

    async def put(self, event: AgentEvent) -> None:
        return None


class StreamQueue:
    """The events of one ``client.stream`` request on their way to its one consumer.

    While the request runs, at most ``capacity`` events wait to be read: a
    request ahead of its consumer waits in ``put``. Once the consumer asked to
    stop the request (``unbound``), the request's last events (cancelled calls,
    the final transitions) are queued without waiting, so cancelling never waits
    for a consumer that is not reading; their number is bounded by the request's
    open calls. Once the consumer is gone (``abandon``), events are dropped.
    """

    def __init__(self, capacity: int = STREAM_BUFFER) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._events: collections.deque[AgentEvent] = collections.deque()
        self._capacity = capacity
        self._bounded = True
        self._closed = False
        self._gone = False
        self._readers = trio.lowlevel.ParkingLot()
        self._writers = trio.lowlevel.ParkingLot()

    # the request's side -----------------------------------------------------

    def offer(self, event: AgentEvent) -> bool:
        if self._gone:
            return True
        if self._bounded and len(self._events) >= self._capacity:
            return False
        self._events.append(event)
        if self._readers:
            self._readers.unpark()
        return True

    async def put(self, event: AgentEvent) -> None:
        while not self.offer(event):
            await self._writers.park()

    def close(self) -> None:
        """No more events (the request ended): the consumer reads what is left, then the end."""
        self._closed = True
        self._readers.unpark_all()

    # the consumer's side ----------------------------------------------------

    def receive_nowait(self) -> AgentEvent:
        """The next event; WouldBlock when none is ready, EndOfChannel after the last."""
        if self._events:
            event = self._events.popleft()
            if self._writers:
                self._writers.unpark()
            return event
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> AgentEvent:
        while True:
            try:
                return self.receive_nowait()
            except trio.WouldBlock:
                await self._readers.park()

    def unbound(self) -> None:
        """The consumer is stopping the request: its last events no longer wait for room."""
        self._bounded = False
        self._writers.unpark_all()

    def abandon(self) -> None:
        """The consumer left: drop what is queued and what comes."""
        self._gone = True
        self._events.clear()
        self._writers.unpark_all()

    def __len__(self) -> int:
        return len(self._events)

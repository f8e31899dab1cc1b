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

from machines.frozen import constructor
from orchestrator.events import AgentEvent, TextDeltaEvent

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
    for a consumer that is not reading; each event past ``capacity`` is a
    cancellation point of the request, so their number is bounded by what a
    request ends with (its open calls). Once the consumer is gone (``abandon``),
    events are dropped.

    A text delta may be queued as its parts (``offer_text``): the consumer builds its
    TextDeltaEvent when it reads it. An event is an object the garbage collector
    tracks; a str, an int and a float are not, so a thousand requests each running
    a burst of deltas ahead of their consumers do not set off collections.

    The buffer (a deque) is made with the first event and kept while the request
    runs: one made anew for every burst would be a young object, which every
    collection of the young generations traverses with all it holds. While the
    request waits for a person (``release_when_read``), a consumer that has read
    everything lets it go, so a thousand requests waiting for approvals keep none.
    """

    __slots__ = (
        "_bounded",
        "_capacity",
        "_closed",
        "_count",
        "_events",
        "_gone",
        "_reader",
        "_release",
        "_request_id",
        "_session_id",
        "_writers",
        "_writers_parked",
    )

    def __init__(self, capacity: int = STREAM_BUFFER) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        # Made on the first event (again after the consumer let it go: see release_when_read).
        # An event is one entry; a text delta taken as its parts is three: its text, seq and ts.
        self._events: collections.deque[_Entry] | None = None
        self._release = False
        self._count = 0  # events queued (a delta's parts count as one)
        self._capacity = capacity
        self._session_id = ""
        self._request_id = ""
        self._bounded = True
        self._closed = False
        self._gone = False
        # The consumer's task while it waits for an event (one reader: no parking lot).
        self._reader: trio.lowlevel.Task | None = None
        # Made when the request first has to wait for room.
        self._writers: trio.lowlevel.ParkingLot | None = None
        # How many tasks wait for room and were not woken yet (a plain count: cheaper to test,
        # once per event, than the lot). The waker takes one off as it wakes a task; a task whose
        # wait ends otherwise (cancelled) takes itself off.
        self._writers_parked = 0

    def release_when_read(self, release: bool) -> None:
        """Whether a consumer that has read every event lets the buffer go before it waits.

        The request sets it while it waits for a person (paused in awaiting_approval)
        and clears it when it resumes; the next event makes a new buffer.
        """
        self._release = release
        if release and not self._events:
            self._events = None

    def stamp(self, session_id: str, request_id: str) -> None:
        """The ids a text delta taken as its parts is built with."""
        self._session_id = session_id
        self._request_id = request_id

    # the request's side -----------------------------------------------------

    def offer(self, event: AgentEvent) -> bool:
        if self._gone:
            return True
        events = self._events
        if events is None:
            events = self._events = collections.deque()
        elif self._count >= self._capacity:
            return False
        events.append(event)
        self._count += 1
        if self._reader is not None:
            self._wake_reader()
        return True

    def offer_text(self, text: str, seq: int, ts: float) -> bool:
        """Take the text delta numbered ``seq`` as its parts, like ``offer`` (False: no room).

        The consumer reads it as ``TextDeltaEvent(session_id=..., request_id=...,
        seq=seq, ts=ts, text=text)`` with the ids given to ``stamp``.
        """
        if self._gone:
            return True
        events = self._events
        if events is None:
            events = self._events = collections.deque()
        elif self._count >= self._capacity:
            return False
        events.append(text)
        events.append(seq)
        events.append(ts)
        self._count += 1
        if self._reader is not None:
            self._wake_reader()
        return True

    def _append(self, event: AgentEvent) -> None:
        if self._events is None:
            self._events = collections.deque()
        self._events.append(event)
        self._count += 1
        if self._reader is not None:
            self._wake_reader()

    def _wake_reader(self) -> None:
        task, self._reader = self._reader, None
        assert task is not None
        trio.lowlevel.reschedule(task)

    async def put(self, event: AgentEvent) -> None:
        while not self.offer(event):
            if not self._bounded:
                # Past capacity once the consumer stopped the request: queued without waiting,
                # but a request that is being cancelled stops here (a model that never awaits
                # would otherwise queue its whole stream).
                await trio.lowlevel.checkpoint_if_cancelled()
                self._append(event)
                return
            if self._writers is None:
                self._writers = trio.lowlevel.ParkingLot()
            self._writers_parked += 1
            try:
                await self._writers.park()
            except BaseException:
                self._writers_parked -= 1
                raise

    def close(self) -> None:
        """No more events (the request ended): the consumer reads what is left, then the end."""
        self._closed = True
        if self._reader is not None:
            self._wake_reader()

    # the consumer's side ----------------------------------------------------

    def take_ready(self) -> AgentEvent | None:
        """The next event if one is queued (waking a writer that waits for room); None otherwise.

        Never raises: the consumer's wait path raises no exception, whose
        traceback would make its frames into objects that stay while it waits.
        """
        events = self._events
        if not events:
            return None
        entry = events.popleft()
        self._count -= 1
        if type(entry) is str:
            # A text delta's parts: its seq and ts follow.
            event = _new_text_delta(self._session_id, self._request_id, events.popleft(), events.popleft(), entry)
        else:
            event = entry  # type: ignore[assignment]
        if self._writers_parked:
            assert self._writers is not None
            self._writers_parked -= 1
            self._writers.unpark()
        return event

    def receive_nowait(self) -> AgentEvent:
        """The next event; WouldBlock when none is ready, EndOfChannel after the last."""
        event = self.take_ready()
        if event is not None:
            return event
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> AgentEvent:
        """The next event, waiting for one; EndOfChannel after the last.

        One task reads at a time: a second one gets BusyResourceError.
        """
        while True:
            event = self.take_ready()
            if event is not None:
                return event
            if self._closed:
                raise trio.EndOfChannel
            if self._reader is not None:
                raise trio.BusyResourceError("another task is already waiting for this stream's next event")
            if self._release:
                self._events = None
            self._reader = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort_wait)

    def _abort_wait(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._reader = None
        return trio.lowlevel.Abort.SUCCEEDED

    def unbound(self) -> None:
        """The consumer is stopping the request: its last events no longer wait for room."""
        self._bounded = False
        if self._writers is not None:
            self._writers_parked = 0
            self._writers.unpark_all()

    def abandon(self) -> None:
        """The consumer left: drop what is queued and what comes."""
        self._gone = True
        self._events = None
        self._count = 0
        if self._writers is not None:
            self._writers_parked = 0
            self._writers.unpark_all()

    def __len__(self) -> int:
        return self._count


#: What a StreamQueue holds: events, and text deltas as their parts (text, seq, ts).
_Entry = AgentEvent | str | int | float

_new_text_delta = constructor(TextDeltaEvent, positional=True)

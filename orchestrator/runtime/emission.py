"""How a request streams and delivers its events: the part of RequestRun that numbers them.

``EventEmission`` is the first base of ``RequestRun`` (``orchestrator.runtime.run``): it
builds the runtime's own events, numbers every streamed event (``seq`` from 1,
without gaps, ``ts`` when emitted), offers it to the request's sink (a
``client.stream`` queue, a run's log, or nothing), waiting for room in ``seq``
order when the sink has none, and delivers it to every ``on_event`` that wants
it. Events nobody hears (no consumer, no ``on_event`` asking for that name) are
not built at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from machines.build import Step
from machines.frozen import constructor
from orchestrator import events as ev
from orchestrator.runtime.redaction import Redactor, redacted
from orchestrator.runtime.sinks import DropSink, EventSink

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext
    from orchestrator.runtime.hooks import AgentExtension

log = logging.getLogger("orchestrator.runtime")


class EventEmission:
    """Numbering, streaming and delivering a request's events (a base of RequestRun)."""

    # Set by RequestRun.__init__: the sink, the ids events are stamped with, who hears what
    # (None: every name), the last seq, and the events waiting for room behind the fair lock.
    __slots__ = (
        "_heard_names",
        "_listened",
        "_redact",
        "_request_id",
        "_send_lock",
        "_session_id",
        "_sink",
        "_waiting",
        "seq",
    )

    seq: int
    _sink: EventSink
    _waiting: int
    _send_lock: trio.Lock | None
    _session_id: str
    _request_id: str
    _heard_names: frozenset[str] | None
    _listened: frozenset[str] | None
    _redact: Redactor | None  # the agent's redaction (None: events are delivered as they are)
    # RequestRun's.
    context: AgentRunContext
    hooks: Mapping[str, Sequence[AgentExtension]]
    ending: bool

    async def _announce(self, step: Step) -> None:
        heard = self._heard_names
        if heard is not None and "transition" not in heard:
            return
        self.seq += 1
        event = _new_transition(
            self._session_id,
            self._request_id,
            self.seq,
            time.time(),
            step.machine,
            step.region,
            step.source,
            step.trigger,
            step.dest,
        )
        if self._waiting or not self._sink.offer(event):
            await self._send_in_turn(event)
        listened = self._listened
        if listened is None or "transition" in listened:
            await self._deliver(event)

    def _stamp(self, event: ev.AgentEvent) -> ev.AgentEvent:
        if event.session_id and event.request_id:
            return event
        return attrs.evolve(
            event,
            session_id=event.session_id or self.context.session_id,
            request_id=event.request_id or self.context.request_id,
        )

    def _number(self) -> int:
        self.seq += 1
        return self.seq

    def _heard(self, name: str) -> bool:
        """Whether an event named ``name`` reaches anyone: a consumer, or an on_event that wants it."""
        return self._heard_names is None or name in self._heard_names

    async def emit(self, event: ev.AgentEvent) -> None:
        """Stream ``event`` (numbered: its ids, next ``seq`` and ``ts``) and deliver it to every on_event."""
        if not self._heard(event.name):
            return
        event = attrs.evolve(
            event,
            session_id=event.session_id or self.context.session_id,
            request_id=event.request_id or self.context.request_id,
            seq=self._number(),
            ts=time.time(),
        )
        if self._waiting or not self._sink.offer(event):
            await self._send_in_turn(event)
        if self._delivers(event.name):
            await self._deliver(event)

    async def forward(self, event: ev.AgentEvent) -> None:
        """Stream another request's event (a subagent's) in this request's order; not delivered to on_event.

        It keeps its own ids and ``ts`` and takes this request's next ``seq``. Nothing
        is streamed when this request has no consumer.
        """
        if self._sink is _DROP:
            return
        event = attrs.evolve(event, seq=self._number())
        if self._waiting or not self._sink.offer(event):
            await self._send_in_turn(event)

    @property
    def streams(self) -> bool:
        """Whether this request's events reach a consumer (a stream or a run's log)."""
        return self._sink is not _DROP

    async def _send_in_turn(self, event: ev.AgentEvent) -> None:
        """Hand ``event`` to a sink that has no room, after every event numbered before it.

        Events are numbered as they are built; tasks of one request (parallel tool
        calls) that wait for room queue on a fair lock in that order, and no event
        overtakes them while any waits, so the sink receives them in ``seq`` order.
        """
        if self._send_lock is None:
            self._send_lock = trio.Lock()
        self._waiting += 1
        try:
            async with self._send_lock:
                await self._sink.put(event)
        finally:
            self._waiting -= 1

    async def _emit_new(self, kind: type[ev.AgentEvent], **fields: Any) -> None:
        """Build, number and stream an event of the runtime's own (no copy, unlike ``emit``)."""
        heard = self._heard_names
        if heard is not None and kind.kind not in heard:
            return
        build = _BUILDERS.get(kind) or _builder(kind)
        event = build(
            session_id=self._session_id, request_id=self._request_id, seq=self._number(), ts=time.time(), **fields
        )
        await self._stream(event)

    async def _emit(self, kind: type[ev.AgentEvent], *values: Any) -> None:
        """``_emit_new`` with the event's own fields given in their declared order (after its ids, seq and ts).

        No keyword dictionary is built and merged: this is the way for the events
        every turn emits (model and tool calls).
        """
        heard = self._heard_names
        if heard is not None and kind.kind not in heard:
            return
        build = _POSITIONAL.get(kind) or _positional(kind)
        self.seq += 1
        event = build(self._session_id, self._request_id, self.seq, time.time(), *values)
        # _stream, unrolled as in _announce: one coroutine less for each model and tool call.
        if self._waiting or not self._sink.offer(event):
            await self._send_in_turn(event)
        listened = self._listened
        if listened is None or event.kind in listened:
            await self._deliver(event)

    async def _stream(self, event: ev.AgentEvent) -> None:
        """Hand a numbered event of the runtime's own to the sink, then to every on_event that wants it."""
        if self._waiting or not self._sink.offer(event):
            await self._send_in_turn(event)
        listened = self._listened
        if listened is None or event.kind in listened:
            await self._deliver(event)

    def _delivers(self, name: str) -> bool:
        """Whether some on_event wants events named ``name``."""
        return self._listened is None or name in self._listened

    async def publish(self, event: ev.AgentEvent, *, to_publisher: bool = False) -> None:
        """Deliver ``event`` to every on_event (not streamed).

        ``to_publisher`` (``AgentRunContext.publish``): once the request is ending, the
        first failing subscriber's error is raised to the publisher after every
        subscriber saw the event, instead of only being logged.
        """
        if not self._delivers(event.name):
            return
        await self._deliver(self._stamp(event), to_publisher=to_publisher)

    async def _deliver(self, event: ev.AgentEvent, *, to_publisher: bool = False) -> None:
        """Run every on_event; once the request is ending or ended, one failing hook is only logged.

        A live request fails when a subscriber raises. A failing or cancelled request (and
        one that reached a final state) can no longer fail, so a broken subscriber must not
        stop the others from seeing its last events nor the request from reaching its end.
        An extension publishing then still learns that its event was refused (a steering
        message published after the inbox closed raises SteeringClosed): with
        ``to_publisher`` the first failure is raised once every subscriber ran.
        """
        refused: Exception | None = None
        if self._redact is not None:
            event = redacted(self._redact, event)
        for extension in self.hooks["on_event"]:
            if extension.event_names is not None and event.name not in extension.event_names:
                continue
            if not self.ending:
                await extension.on_event(self.context, event)
                continue
            try:
                await extension.on_event(self.context, event)
            except Exception as error:
                if to_publisher and refused is None:
                    refused = error
                else:
                    log.exception("on_event of %s failed for %s", extension.name, event.name)
        if refused is not None:
            raise refused


#: Events built by constructors that store their fields directly (machines.frozen).
_new_transition = constructor(ev.TransitionEvent, positional=True)


_new_text_delta = constructor(ev.TextDeltaEvent, positional=True)


_BUILDERS: dict[type[ev.AgentEvent], Callable[..., ev.AgentEvent]] = {}


def _builder(kind: type[ev.AgentEvent]) -> Callable[..., ev.AgentEvent]:
    build = _BUILDERS[kind] = constructor(kind)
    return build


_POSITIONAL: dict[type[ev.AgentEvent], Callable[..., ev.AgentEvent]] = {}


def _positional(kind: type[ev.AgentEvent]) -> Callable[..., ev.AgentEvent]:
    build = _POSITIONAL[kind] = constructor(kind, positional=True)
    return build


def _heard_names(listeners: Sequence[AgentExtension]) -> frozenset[str] | None:
    """The event names some listener wants, or None when one wants every event."""
    names: set[str] = set()
    for listener in listeners:
        if listener.event_names is None:
            return None
        names |= listener.event_names
    return frozenset(names)


_DROP = DropSink()

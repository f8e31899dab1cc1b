"""Benchmark-only experiments: monkeypatches that try a proposed core change.

Nothing here is used by the runtime itself. ``python -m bench --experiment NAME``
adds a row measured with the patch applied, beside the unpatched figures, so the
effect of a proposal is measured in the same run. See bench/README.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import trio
from transitions import EventData

from machines import build
from machines.build import BoundMachine, IllegalTransition, Step
from machines.definition import MachineDefinition, Transition
from orchestrator import agent as agent_module
from orchestrator.events import AgentEvent
from orchestrator.runtime import RequestRun
from orchestrator.stream import RunStream

_Edge = tuple[str, tuple[tuple[str, bool], ...], Transition]


def _guard_name(func: object) -> str:
    name: str = getattr(func, "name")  # noqa: B009 (the generated conditions are _NamedGuard objects)
    return name


@functools.cache
def _edges(definition: MachineDefinition, region: str, trigger: str, source: str) -> tuple[_Edge, ...] | None:
    """The edges of ``trigger`` from ``source``, read once from the generated transitions machine."""
    event = build.generated(definition)[region].events[trigger]
    if source not in event.transitions:
        return None
    compiled: list[_Edge] = []
    for edge in event.transitions[source]:
        checks = tuple((_guard_name(condition.func), bool(condition.target)) for condition in edge.conditions)
        taken: Transition = next(cb.args[0] for cb in edge.after if isinstance(cb, functools.partial))
        compiled.append((str(edge.dest), checks, taken))
    return tuple(compiled)


def _table_try_fire(self: BoundMachine, trigger: str, **kwargs: Any) -> tuple[Step, Transition] | None:
    """try_fire that evaluates the generated machine's edges itself (no Event.trigger)."""
    region = self._regions.get(trigger)
    if region is None:
        raise IllegalTransition(self.definition.name, "?", "?", trigger)
    model = self.model
    source: str = getattr(model, region.attribute)
    edges = _edges(self.definition, region.name, trigger, source)
    if edges is None:
        raise IllegalTransition(self.definition.name, region.name, source, trigger)
    event = EventData(None, None, self._machines[region.name], model, (), kwargs)
    guards = model.guards
    for dest, checks, taken in edges:
        if all(bool(guards[name](event)) is target for name, target in checks):
            setattr(model, region.attribute, dest)
            step = Step(self.definition.name, region.name, source, trigger, dest)
            self.history.append(step)
            return step, taken
    return None


def table_fire() -> None:
    """Fire transitions from a table compiled out of the generated machines."""
    BoundMachine.try_fire = _table_try_fire  # type: ignore[method-assign]


async def _draining_anext(self: RunStream) -> AgentEvent:
    """RunStream.__anext__ that hands out queued events without a scheduler round trip."""
    receive = self._receive if self._receive is not None else self._start()
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            return receive.receive_nowait()
        except trio.WouldBlock:
            return await receive.receive()
    except trio.EndOfChannel:
        if self.error is not None and not self._raised:
            self._raised = True
            raise self.error from None
        raise StopAsyncIteration from None
    except trio.Cancelled:
        await self.aclose()
        raise


def stream_drain() -> None:
    """RunStream returns already queued events at once (one wake-up per batch, not per event)."""
    RunStream.__anext__ = _draining_anext  # type: ignore[method-assign]


def quiet_events() -> None:
    """Skip building and delivering events when nobody listens (client.run, no on_event hook)."""
    announce, emit, publish = RequestRun._announce, RequestRun.emit, RequestRun.publish

    def quiet(run: RequestRun) -> bool:
        return run._send is agent_module._discard and not run.hooks["on_event"]

    async def quiet_announce(self: RequestRun, step: Step) -> None:
        if not quiet(self):
            await announce(self, step)

    async def quiet_emit(self: RequestRun, event: AgentEvent) -> None:
        if not quiet(self):
            await emit(self, event)

    async def quiet_publish(self: RequestRun, event: AgentEvent) -> None:
        if not quiet(self):
            await publish(self, event)

    RequestRun._announce = quiet_announce  # type: ignore[method-assign]
    RequestRun.emit = quiet_emit  # type: ignore[method-assign]
    RequestRun.publish = quiet_publish  # type: ignore[method-assign]


EXPERIMENTS: dict[str, Callable[[], None]] = {
    "table_fire": table_fire,
    "stream_drain": stream_drain,
    "quiet_events": quiet_events,
}


def apply(names: list[str] | tuple[str, ...]) -> None:
    for name in names:
        EXPERIMENTS[name]()

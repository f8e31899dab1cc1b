"""Benchmark-only experiments: monkeypatches that try a proposed core change.

Nothing here is used by the runtime itself. ``python -m bench --experiment NAME``
adds a row measured with the patch applied, beside the unpatched figures, so the
effect of a proposal is measured in the same run. See bench/README.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from transitions import EventData

from machines import build
from machines.build import BoundMachine, IllegalTransition, Step
from machines.definition import MachineDefinition, Transition

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


EXPERIMENTS: dict[str, Callable[[], None]] = {
    "table_fire": table_fire,
}


def apply(names: list[str] | tuple[str, ...]) -> None:
    for name in names:
        EXPERIMENTS[name]()

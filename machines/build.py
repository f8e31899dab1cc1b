"""Turn declarative definitions into ``transitions`` machines and bind models.

One synchronous ``transitions.Machine`` is generated per region and shared by
every model bound to it, so the states, edges and guards live in
``transitions`` while each request only carries its own state attributes.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from transitions import EventData, Machine, MachineError

from machines.definition import MachineDefinition, Region, Transition

Guard = Callable[[EventData], bool]


class IllegalTransition(RuntimeError):
    """A trigger was fired from a state that has no edge for it, or the machine has no such trigger.

    For an unknown trigger ``region`` and ``state`` are empty. ``allowed`` names
    the triggers that do have an edge from ``state``.
    """

    def __init__(self, machine: str, region: str, state: str, trigger: str, allowed: tuple[str, ...] = ()) -> None:
        if region:
            message = (
                f"{machine}: trigger {trigger!r} is not allowed from {region} state {state!r}"
                f" (allowed there: {', '.join(allowed) or 'none'})"
            )
        else:
            message = f"{machine}: no region of the machine has a trigger {trigger!r}"
        super().__init__(message)
        self.machine = machine
        self.region = region
        self.state = state
        self.trigger = trigger
        self.allowed = allowed


class GuardRefused(RuntimeError):
    """Every edge of a trigger had a guard that did not hold."""

    def __init__(self, machine: str, region: str, state: str, trigger: str, guards: tuple[str, ...]) -> None:
        super().__init__(
            f"{machine}: trigger {trigger!r} refused in {region} state {state!r}; "
            f"guards {', '.join(guards) or '(none)'} did not all hold"
        )
        self.machine = machine
        self.region = region
        self.state = state
        self.trigger = trigger
        self.guards = guards


@attrs.frozen
class Step:
    """One transition that was taken."""

    machine: str
    region: str
    source: str
    trigger: str
    dest: str


class _LeanMachine(Machine):
    """A Machine that binds no convenience methods onto its models.

    Models are driven through ``Event.trigger`` directly, so per-model cost is
    only the state attribute the machine writes.
    """

    def _checked_assignment(self, model: Any, name: str, func: Any) -> None:
        return None


class _NamedGuard:
    """A condition that looks its predicate up in the model's guard table."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__name__ = name

    def __call__(self, event: EventData) -> bool:
        model = typing.cast(MachineModel, event.model)
        return model.guards[self.name](event)

    def __repr__(self) -> str:
        return self.name


def _note_taken(definition: Transition, event: EventData) -> None:
    typing.cast(MachineModel, event.model).taken = definition


def _generate(definition: MachineDefinition, region: Region) -> Machine:
    machine = _LeanMachine(
        model=None,
        states=list(region.state_names),
        initial=region.initial,
        auto_transitions=False,
        send_event=True,
        model_attribute=region.attribute,
        name=f"{definition.name}.{region.name}",
    )
    for edge in region.transitions:
        machine.add_transition(
            edge.trigger,
            list(edge.source),
            edge.dest,
            conditions=[_NamedGuard(name) for name in edge.conditions],
            unless=[_NamedGuard(name) for name in edge.unless],
            after=[functools.partial(_note_taken, edge)],
        )
    return machine


@functools.cache
def _trigger_regions(definition: MachineDefinition) -> dict[str, Region]:
    return {trigger: region for region in definition.regions for trigger in region.triggers}


@functools.cache
def generated(definition: MachineDefinition) -> dict[str, Machine]:
    """The shared ``transitions`` machines of a definition, one per region."""
    return {region.name: _generate(definition, region) for region in definition.regions}


class MachineModel:
    """The object whose attributes ``transitions`` updates; one per bound machine.

    ``host`` is the object the guards inspect (reach it as ``event.model.host``),
    so one guard table can serve every model.
    """

    def __init__(self, guards: Mapping[str, Guard], host: object = None) -> None:
        self.guards = guards
        self.host = host
        self.taken: Transition | None = None


class BoundMachine:
    """A definition bound to one model: fire triggers, read states, unbind."""

    def __init__(
        self,
        definition: MachineDefinition,
        guards: Mapping[str, Guard],
        *,
        initial: Mapping[str, str] | None = None,
        host: object = None,
    ) -> None:
        missing = definition.guard_names - set(guards)
        if missing:
            raise ValueError(f"{definition.name}: no predicate for guards {sorted(missing)}")
        self.definition = definition
        self.model = MachineModel(guards, host)
        self.history: list[Step] = []
        self._machines = generated(definition)
        self._regions = _trigger_regions(definition)
        initial = initial or {}
        for region in definition.regions:
            self._machines[region.name].add_model(self.model, initial=initial.get(region.name, region.initial))
        self._bound = True

    def state(self, region: str | None = None) -> str:
        """Current state of ``region`` (the main region by default)."""
        reg = self.definition.main if region is None else self.definition.region(region)
        value: str = getattr(self.model, reg.attribute)
        return value

    @property
    def states(self) -> dict[str, str]:
        return {region.name: self.state(region.name) for region in self.definition.regions}

    @property
    def is_final(self) -> bool:
        main = self.definition.main
        return self.state() in main.final_states

    def _region_of(self, trigger: str) -> Region:
        region = self._regions.get(trigger)
        if region is None:
            raise IllegalTransition(self.definition.name, "", "", trigger)
        return region

    def fire(self, trigger: str, **kwargs: Any) -> tuple[Step, Transition]:
        """Take ``trigger`` or raise IllegalTransition / GuardRefused."""
        result = self.try_fire(trigger, **kwargs)
        if result is None:
            region = self._region_of(trigger)
            state = self.state(region.name)
            guards = tuple(g for edge in region.edges(trigger, state) for g in edge.guards)
            raise GuardRefused(self.definition.name, region.name, state, trigger, guards)
        return result

    def try_fire(self, trigger: str, **kwargs: Any) -> tuple[Step, Transition] | None:
        """Take ``trigger`` if a guard allows it; None when every guard refused."""
        region = self._region_of(trigger)
        machine = self._machines[region.name]
        source = self.state(region.name)
        self.model.taken = None
        try:
            taken = machine.events[trigger].trigger(self.model, **kwargs)
        except MachineError:
            allowed = tuple(t for t in region.triggers if region.edges(t, source))
            raise IllegalTransition(self.definition.name, region.name, source, trigger, allowed) from None
        if not taken or self.model.taken is None:
            return None
        step = Step(self.definition.name, region.name, source, trigger, self.state(region.name))
        self.history.append(step)
        return step, self.model.taken

    def may(self, trigger: str, **kwargs: Any) -> bool:
        """Whether ``trigger`` would be taken now (guards evaluated, nothing changes).

        Raises IllegalTransition when the machine has no such trigger at all.
        """
        region = self._region_of(trigger)
        machine = self._machines[region.name]
        state = self.state(region.name)
        if trigger not in machine.get_triggers(state):
            return False
        result: bool = machine._can_trigger(self.model, trigger, **kwargs)
        return result

    def unbind(self) -> None:
        """Detach the model from the shared machines (idempotent)."""
        if not self._bound:
            return
        self._bound = False
        for region in self.definition.regions:
            self._machines[region.name].remove_model(self.model)

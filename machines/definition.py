"""Declarative data types that describe a state machine."""

from __future__ import annotations

import attrs

from machines.values import FieldRepr


def _as_tuple(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@attrs.frozen(cache_hash=True, repr=False)  # FieldRepr: attrs' repr, shared
class State(FieldRepr):
    """One state of a region."""

    name: str
    doc: str = ""
    final: bool = False


@attrs.frozen(cache_hash=True, repr=False)  # FieldRepr: attrs' repr, shared
class Transition(FieldRepr):
    """A guarded edge.

    ``conditions`` must all hold and ``unless`` must all fail for the edge to be
    taken. ``callbacks`` name the steps the runtime awaits, in order, once the
    edge has been taken (extension hooks and runtime actions).
    """

    trigger: str
    source: tuple[str, ...] = attrs.field(converter=_as_tuple)
    dest: str
    conditions: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)
    unless: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)
    callbacks: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)
    doc: str = ""

    @property
    def guards(self) -> tuple[str, ...]:
        """Guard labels, negated ones prefixed with ``!``."""
        return self.conditions + tuple(f"!{name}" for name in self.unless)


@attrs.frozen(cache_hash=True, repr=False)  # FieldRepr: attrs' repr, shared
class Region(FieldRepr):
    """An independent set of states held in one attribute of the model."""

    name: str
    attribute: str
    states: tuple[State, ...]
    initial: str
    transitions: tuple[Transition, ...]

    def state(self, name: str) -> State:
        for state in self.states:
            if state.name == name:
                return state
        raise KeyError(f"region {self.name!r} has no state {name!r}")

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(state.name for state in self.states)

    @property
    def triggers(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for transition in self.transitions:
            seen.setdefault(transition.trigger, None)
        return tuple(seen)

    @property
    def final_states(self) -> frozenset[str]:
        return frozenset(state.name for state in self.states if state.final)

    def edges(self, trigger: str, source: str) -> tuple[Transition, ...]:
        """Edges of ``trigger`` leaving ``source``, in evaluation order."""
        return tuple(t for t in self.transitions if t.trigger == trigger and source in t.source)

    def validate(self) -> None:
        """Raise ValueError if the region refers to unknown states."""
        names = set(self.state_names)
        if len(names) != len(self.states):
            raise ValueError(f"region {self.name!r} repeats a state name")
        if self.initial not in names:
            raise ValueError(f"region {self.name!r}: unknown initial {self.initial!r}")
        for t in self.transitions:
            unknown = (set(t.source) | {t.dest}) - names
            if unknown:
                raise ValueError(f"region {self.name!r}, trigger {t.trigger!r}: unknown {sorted(unknown)}")
            if names & set(t.source) & self.final_states:
                raise ValueError(f"region {self.name!r}, trigger {t.trigger!r} leaves a final state")


@attrs.frozen(cache_hash=True, repr=False)  # FieldRepr: attrs' repr, shared
class MachineDefinition(FieldRepr):
    """A named machine made of one or more orthogonal regions."""

    name: str
    doc: str
    regions: tuple[Region, ...]

    def __attrs_post_init__(self) -> None:
        triggers: set[str] = set()
        attributes: set[str] = set()
        for region in self.regions:
            region.validate()
            if region.attribute in attributes:
                raise ValueError(f"{self.name}: attribute {region.attribute!r} reused")
            attributes.add(region.attribute)
            clash = triggers & set(region.triggers)
            if clash:
                raise ValueError(f"{self.name}: triggers in two regions: {sorted(clash)}")
            triggers |= set(region.triggers)

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(f"machine {self.name!r} has no region {name!r}")

    @property
    def main(self) -> Region:
        return self.regions[0]

    @property
    def guard_names(self) -> frozenset[str]:
        return frozenset(
            name for region in self.regions for t in region.transitions for name in t.conditions + t.unless
        )

    @property
    def callback_names(self) -> frozenset[str]:
        return frozenset(name for region in self.regions for t in region.transitions for name in t.callbacks)

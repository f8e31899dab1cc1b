"""Turn declarative definitions into ``transitions`` machines and bind models.

One synchronous ``transitions.Machine`` is generated per region and shared by
every model bound to it, so the states, edges and guards live in
``transitions`` while each request only carries its own state attributes.
"""

from __future__ import annotations

import functools
import itertools
import logging
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
from transitions import EventData, Machine, MachineError
from transitions.core import Condition, Event, listify
from transitions.core import State as MachineState
from transitions.core import Transition as MachineTransition

from machines.definition import MachineDefinition, Region, Transition
from machines.frozen import constructor

Guard = Callable[[EventData], bool]

_log = logging.getLogger("transitions.core")


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


class Unbound(RuntimeError):
    """A trigger was fired on a machine after ``unbind``: it takes no more steps."""

    def __init__(self, machine: str, trigger: str) -> None:
        super().__init__(f"{machine}: trigger {trigger!r} fired after the machine was unbound")
        self.machine = machine
        self.trigger = trigger


@attrs.frozen
class Step:
    """One transition that was taken: on which machine and region, from where, by which trigger, to where."""

    machine: str
    region: str
    source: str
    trigger: str
    dest: str

    def __str__(self) -> str:
        return f"{self.machine}.{self.region}: {self.source} -{self.trigger}-> {self.dest}"


def steps_in(steps: Iterable[Step], *, region: str | None = None, machine: str | None = None) -> list[Step]:
    """The steps of one region (and/or one machine), in order; all of them when neither is named."""
    return [
        step
        for step in steps
        if (region is None or step.region == region) and (machine is None or step.machine == machine)
    ]


_new_step = constructor(Step, positional=True)


def _key(model: object) -> object:
    """How ModelSet keys ``model``: itself when it compares by identity (MachineModel does), else its id."""
    kind = type(model)
    return model if kind.__eq__ is object.__eq__ and kind.__hash__ is object.__hash__ else id(model)


class ModelSet:
    """The models bound to one shared machine: insertion-ordered, O(1) membership, add and removal.

    Stands in for ``Machine.models`` (a list in ``transitions``, where adding and
    removing a model scans every live model). Models are keyed by identity: a
    model that compares by identity is its own key (no id object per model).
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[object, Any] = {}

    def __contains__(self, model: object) -> bool:
        return self._items.get(_key(model)) is model

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)

    def append(self, model: object) -> None:
        """Add ``model`` (the name ``transitions`` uses for its list)."""
        self._items[_key(model)] = model

    def remove(self, model: object) -> None:
        """Remove ``model``; ValueError when it is not bound, as ``list.remove``."""
        key = _key(model)
        if self._items.get(key) is not model:
            raise ValueError("model is not bound to this machine")
        del self._items[key]


class _LeanState(MachineState):
    """A state that runs its enter/exit callbacks only when it has some, without logging each step."""

    def enter(self, event_data: EventData) -> None:
        if self.on_enter:
            event_data.machine.callbacks(self.on_enter, event_data)

    def exit(self, event_data: EventData) -> None:
        if self.on_exit:
            event_data.machine.callbacks(self.on_exit, event_data)


class _LeanCondition(Condition):
    """A condition that calls a callable guard directly (names are still resolved on the model)."""

    def __init__(self, func: Any, target: bool = True) -> None:
        super().__init__(func, target)
        self._callable = callable(func)
        # A guard of the definition: its predicate is looked up in the model's table here,
        # without a call of the _NamedGuard in between.
        self._guard: str | None = func.name if isinstance(func, _NamedGuard) else None

    def check(self, event_data: EventData) -> bool:
        guard = self._guard
        if guard is not None:
            model = typing.cast(MachineModel, event_data.model)
            held = model.guards[guard](event_data)
            return held is self.target or bool(held == self.target)
        func: Any = self.func
        predicate = func if self._callable else event_data.machine.resolve_callable(func, event_data)
        if event_data.machine.send_event:
            return bool(predicate(event_data) == self.target)
        return bool(predicate(*event_data.args, **event_data.kwargs) == self.target)


class _LeanTransition(MachineTransition):
    """``Transition.execute`` with the same order of steps, skipping empty callback lists and logging."""

    condition_cls = _LeanCondition
    # The edge of the definition this transition was generated from, and the Step taking it records
    # (a value: every machine of the definition shares it). Both set by _generate.
    definition: Transition | None = None
    step: Step | None = None

    def execute(self, event_data: EventData) -> bool:
        machine = event_data.machine
        if self.prepare:
            machine.callbacks(self.prepare, event_data)
        for condition in self.conditions:
            if not condition.check(event_data):
                return False
        before = machine._before_state_change
        if before or self.before:
            machine.callbacks(itertools.chain(before, self.before), event_data)
        if self.dest:
            self._change_state(event_data)
        after = machine._after_state_change
        if after:
            machine.callbacks(itertools.chain(self.after, after), event_data)
        elif self.after:
            machine.callbacks(self.after, event_data)
        return True

    def _change_state(self, event_data: EventData) -> None:
        """Exit the source, set the model's state, enter the destination (``Transition._change_state``).

        ``source`` and ``dest`` are state names (``add_transition`` stores names),
        so the states are read from the machine's table directly.
        """
        machine = event_data.machine
        states = machine.states
        source = states[self.source]
        if source.on_exit:
            source.exit(event_data)
        name = typing.cast(str, self.dest)
        dest = states[name]
        # A generated machine's states are named by strings: a state's value is its name.
        setattr(event_data.model, machine.model_attribute, name)
        event_data.state = dest
        if dest.on_enter:
            dest.enter(event_data)
        if dest.final and machine._on_final:
            machine.callbacks(machine._on_final, event_data)


class _LeanEvent(Event):
    """``Event`` whose trigger (inherited as is) processes edges without empty callback loops or logging.

    Like ``_LeanTransition`` it reads the machine's callback lists from the
    attributes behind its properties (``_prepare_event`` for ``prepare_event``...).
    """

    def _trigger(self, event_data: EventData) -> bool:
        machine = self.machine
        value = getattr(event_data.model, machine.model_attribute)
        state = machine.states.get(value) if isinstance(value, str) else None
        if state is None:
            state = machine.get_model_state(event_data.model)
        event_data.state = state
        try:
            edges = self.transitions.get(value if isinstance(value, str) else state.name)
            if edges is None:
                # No edge of this trigger leaves the state: MachineError (False when invalid triggers are ignored).
                self._is_valid_source(state)
                return False
            # Event._process: prepare_event callbacks, then the first edge whose conditions hold.
            if machine._prepare_event:
                machine.callbacks(machine._prepare_event, event_data)
            for transition in edges:
                event_data.transition = transition
                if transition.execute(event_data):
                    event_data.result = True
                    typing.cast(MachineModel, event_data.model).taken = typing.cast(_LeanTransition, transition)
                    break
        except BaseException as error:
            event_data.error = typing.cast(Exception, error)
            if not machine._on_exception:
                raise
            machine.callbacks(machine._on_exception, event_data)
        finally:
            if machine._finalize_event:
                try:
                    machine.callbacks(machine._finalize_event, event_data)
                except BaseException as error:
                    _log.error("%sfinalize callbacks raised %s: %s", machine.name, type(error).__name__, error)
        return bool(event_data.result)


class _LeanMachine(Machine):
    """A shared Machine whose models are a ModelSet and whose steps skip empty callback loops.

    Models are driven through ``Event.trigger``, so a model gets no convenience
    methods (``go()``, ``is_a()``, ``may_go()``) and no ``on_enter_<state>``
    methods are looked up on it: adding one only sets its state attribute.
    Everything else (states, edges, condition evaluation, callbacks that are
    configured) is ``transitions``' own behaviour. Never queued (``queued=False``).
    """

    state_cls = _LeanState
    transition_cls = _LeanTransition
    event_cls = _LeanEvent

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(model=None, **kwargs)
        # transitions declares a list; ModelSet offers the part of it transitions uses.
        self.models = ModelSet()  # type: ignore[assignment]

    @property
    def model(self) -> Any:
        models = list(self.models)
        return models[0] if len(models) == 1 else models

    def add_model(self, model: Any, initial: Any = None) -> None:
        if initial is None:
            if self.initial is None:
                raise ValueError("No initial state configured for machine, must specify when adding model.")
            initial = self.initial
        for each in listify(model):
            bound = self if each is self.self_literal else each
            if bound not in self.models:
                self.set_state(initial, model=bound)
                self.models.append(bound)

    def remove_model(self, model: Any) -> None:
        """Remove each model (the generated machines are not queued, so no queued event refers to it)."""
        for each in listify(model):
            self.models.remove(each)

    def get_state(self, state: Any) -> Any:
        """The State named ``state`` (an Enum member by its name); ValueError when there is none."""
        found = self.states.get(state) if isinstance(state, str) else None
        return found if found is not None else super().get_state(state)

    def _process(self, trigger: Callable[[], bool]) -> bool:
        if not self._queued and not self._transition_queue:
            return trigger()
        return super()._process(trigger)

    def callbacks(self, funcs: Iterable[Any], event_data: EventData) -> None:
        for func in funcs:
            self.callback(func, event_data)

    def callback(self, func: Any, event_data: EventData) -> None:
        """``Machine.callback``: a callable is called as it is; a name is resolved first."""
        if not callable(func):
            func = self.resolve_callable(func, event_data)
        if self.send_event:
            func(event_data)
        else:
            func(*event_data.args, **event_data.kwargs)

    def _checked_assignment(self, model: Any, name: str, func: Any) -> None:
        return None

    def _can_trigger(self, model: Any, trigger: str, *args: Any, **kwargs: Any) -> bool:
        """``Machine._can_trigger``: whether an edge of ``trigger`` from the model's state has all its
        conditions holding (prepare callbacks run first, nothing changes), reading the edges of that
        one state instead of listing every trigger of the machine and building a spare Event."""
        state = self.get_model_state(model)
        event = self.events.get(trigger)
        edges = event.transitions.get(state.name) if event is not None else None
        if not edges:
            return False
        event_data = EventData(state, event, self, model, args, kwargs)
        for transition in edges:
            event_data.transition = transition
            try:
                if self._prepare_event:
                    self.callbacks(self._prepare_event, event_data)
                if transition.prepare:
                    self.callbacks(transition.prepare, event_data)
                if all(condition.check(event_data) for condition in transition.conditions):
                    return True
            except BaseException as error:
                event_data.error = typing.cast(Exception, error)
                if not self._on_exception:
                    raise
                self.callbacks(self._on_exception, event_data)
        return False


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


def _generate(definition: MachineDefinition, region: Region) -> Machine:
    machine = _LeanMachine(
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
        )
        # The transition taken is recorded on the model as it is taken (_LeanEvent._trigger).
        for source in edge.source:
            generated_edge = typing.cast(_LeanTransition, machine.events[edge.trigger].transitions[source][-1])
            generated_edge.definition = edge
            generated_edge.step = _new_step(definition.name, region.name, source, edge.trigger, edge.dest)
    return machine


@functools.cache
def _trigger_regions(definition: MachineDefinition) -> dict[str, Region]:
    return {trigger: region for region in definition.regions for trigger in region.triggers}


@functools.cache
def _trigger_events(definition: MachineDefinition) -> dict[str, Event]:
    """Each trigger's ``transitions`` Event, in the generated machine of its region."""
    machines = generated(definition)
    return {
        trigger: machines[region.name].events[trigger] for region in definition.regions for trigger in region.triggers
    }


@functools.cache
def _guard_names(definition: MachineDefinition) -> frozenset[str]:
    return definition.guard_names


@functools.cache
def generated(definition: MachineDefinition) -> dict[str, Machine]:
    """The shared ``transitions`` machines of a definition, one per region."""
    return {region.name: _generate(definition, region) for region in definition.regions}


class MachineModel:
    """The object whose attributes ``transitions`` updates; one per bound machine.

    ``host`` is the object the guards inspect (reach it as ``event.model.host``),
    so one guard table can serve every model. Slotted: each definition's models
    are of a subclass with one slot per region attribute (``_model_class``), so
    thousands of bound machines keep no attribute dict each. Compared by identity.
    """

    __slots__ = ("guards", "host", "taken")

    def __init__(self, guards: Mapping[str, Guard], host: object = None) -> None:
        self.guards = guards
        self.host = host
        self.taken: _LeanTransition | None = None


@functools.cache
def _model_class(definition: MachineDefinition) -> type[MachineModel]:
    """The MachineModel subclass with a slot for each region's state attribute of ``definition``."""
    attributes = tuple(dict.fromkeys(region.attribute for region in definition.regions))
    clash = set(attributes) & set(MachineModel.__slots__)
    if clash:
        raise ValueError(f"{definition.name}: region attributes {sorted(clash)} are reserved by MachineModel")
    name = f"{definition.name.title().replace('_', '')}Model"
    return type(name, (MachineModel,), {"__slots__": attributes, "__module__": __name__})


class BoundMachine:
    """A definition bound to one model: fire triggers, read states, unbind."""

    __slots__ = ("_bound", "_events", "_machines", "_regions", "definition", "history", "model")

    def __init__(
        self,
        definition: MachineDefinition,
        guards: Mapping[str, Guard],
        *,
        initial: Mapping[str, str] | None = None,
        host: object = None,
    ) -> None:
        if not guards.keys() >= _guard_names(definition):
            missing = _guard_names(definition).difference(guards)
            raise ValueError(f"{definition.name}: no predicate for guards {sorted(missing)}")
        self.definition = definition
        self.model = _model_class(definition)(guards, host)
        self.history: list[Step] = []
        self._machines = generated(definition)
        self._regions = _trigger_regions(definition)
        self._events = _trigger_events(definition)
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
        return {region.name: getattr(self.model, region.attribute) for region in self.definition.regions}

    @property
    def is_final(self) -> bool:
        main = self.definition.main
        return getattr(self.model, main.attribute) in main.final_states

    def _region_of(self, trigger: str) -> Region:
        region = self._regions.get(trigger)
        if region is None or not self._bound:
            raise self._refusal(trigger)
        return region

    def _refusal(self, trigger: str) -> IllegalTransition | Unbound:
        """Why ``trigger`` cannot be fired at all: no such trigger, or the machine was unbound."""
        if trigger not in self._regions:
            return IllegalTransition(self.definition.name, "", "", trigger)
        return Unbound(self.definition.name, trigger)

    def fire(self, trigger: str, **kwargs: Any) -> tuple[Step, Transition]:
        """Take ``trigger`` or raise IllegalTransition / GuardRefused."""
        result = self.try_fire(trigger, **kwargs)
        if result is None:
            raise self.refused(trigger)
        return result

    def refused(self, trigger: str) -> GuardRefused:
        """What ``fire`` raises when ``try_fire`` found every guard of ``trigger`` refusing."""
        region = self._region_of(trigger)
        state = self.state(region.name)
        guards = tuple(g for edge in region.edges(trigger, state) for g in edge.guards)
        return GuardRefused(self.definition.name, region.name, state, trigger, guards)

    def try_fire(self, trigger: str, **kwargs: Any) -> tuple[Step, Transition] | None:
        """Take ``trigger`` if a guard allows it; None when every guard refused."""
        event = self._events.get(trigger) if self._bound else None
        if event is None:
            raise self._refusal(trigger)
        model = self.model
        model.taken = None
        try:
            taken = event.trigger(model, **kwargs) if kwargs else event.trigger(model)
        except MachineError:
            # No edge of the trigger leaves the current state (which it therefore did not change).
            region = self._regions[trigger]
            source: str = getattr(model, region.attribute)
            allowed = tuple(t for t in region.triggers if region.edges(t, source))
            raise IllegalTransition(self.definition.name, region.name, source, trigger, allowed) from None
        transition = model.taken
        if not taken or transition is None:
            return None
        # Steps are values: every machine of a definition shares one Step per edge.
        step, edge = transition.step, transition.definition
        assert step is not None and edge is not None
        self.history.append(step)
        return step, edge

    def may(self, trigger: str, **kwargs: Any) -> bool:
        """Whether ``trigger`` would be taken now (guards evaluated, nothing changes).

        Raises IllegalTransition when the machine has no such trigger at all.
        """
        region = self._region_of(trigger)
        result: bool = self._machines[region.name]._can_trigger(self.model, trigger, **kwargs)
        return result

    def unbind(self) -> None:
        """Detach the model from the shared machines, its host and its guards (idempotent).

        The states stay readable; firing or asking ``may`` afterwards raises
        Unbound. Dropping the host and the guards (which often refer back to
        their owner) leaves no reference cycle behind, so whatever owned the
        machine is freed without a garbage collection.
        """
        if not self._bound:
            return
        self._bound = False
        for region in self.definition.regions:
            self._machines[region.name].remove_model(self.model)
        self.model.host = None
        self.model.guards = {}

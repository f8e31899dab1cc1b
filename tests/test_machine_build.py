"""Definitions are validated, and bound machines behave as transitions machines."""

from __future__ import annotations

import pytest

from machines import (
    REQUEST,
    BoundMachine,
    GuardRefused,
    IllegalTransition,
    MachineDefinition,
    Region,
    State,
    Transition,
)
from machines.build import generated


def tiny(**edge: object) -> MachineDefinition:
    transitions = (Transition("go", "a", "b", **edge),)  # type: ignore[arg-type]
    region = Region("main", "state", (State("a"), State("b", final=True)), "a", transitions)
    return MachineDefinition("tiny", "", (region,))


def test_definitions_refer_only_to_known_states() -> None:
    with pytest.raises(ValueError, match="unknown"):
        MachineDefinition("bad", "", (Region("r", "state", (State("a"),), "a", (Transition("go", "a", "z"),)),))
    with pytest.raises(ValueError, match="leaves a final state"):
        MachineDefinition(
            "bad",
            "",
            (Region("r", "state", (State("a"), State("b", final=True)), "a", (Transition("go", "b", "a"),)),),
        )


def test_guards_decide_and_illegal_triggers_raise() -> None:
    allowed = {"ok": True}
    machine = BoundMachine(tiny(conditions="ok"), {"ok": lambda _: allowed["ok"]})
    allowed["ok"] = False
    assert machine.try_fire("go") is None
    with pytest.raises(GuardRefused, match="guards ok did not all hold"):
        machine.fire("go")
    assert machine.state() == "a"
    allowed["ok"] = True
    step, edge = machine.fire("go")
    assert (step.source, step.trigger, step.dest) == ("a", "go", "b")
    assert machine.is_final
    with pytest.raises(IllegalTransition, match="'go' is not allowed from main state 'b'"):
        machine.fire("go")
    with pytest.raises(IllegalTransition):
        machine.fire("nonsense")
    assert machine.history == [step]


def test_missing_guard_predicates_are_refused_at_bind_time() -> None:
    with pytest.raises(ValueError, match="no predicate for guards"):
        BoundMachine(REQUEST, {})


def test_bound_models_share_one_generated_machine_per_region_and_unbind() -> None:
    guards = {name: (lambda _: True) for name in REQUEST.guard_names}
    shared = generated(REQUEST)
    before = len(shared["phase"].models)
    first, second = BoundMachine(REQUEST, guards), BoundMachine(REQUEST, guards)
    assert len(shared["phase"].models) == before + 2
    first.fire("start")
    assert (first.state(), second.state()) == ("setup", "idle")
    assert first.states == {"phase": "setup", "mode": "normal"}
    first.unbind()
    first.unbind()
    second.unbind()
    assert len(shared["phase"].models) == before


def test_callbacks_of_the_taken_edge_are_reported_in_order() -> None:
    guards = {name: (lambda _: True) for name in REQUEST.guard_names}
    machine = BoundMachine(REQUEST, guards)
    _, edge = machine.fire("start")
    (declared,) = REQUEST.main.edges("start", "idle")
    assert edge is declared
    assert edge.callbacks == declared.callbacks and "open_inboxes" in edge.callbacks
    assert machine.may("request_model")
    assert not machine.may("complete")
    machine.unbind()


def test_shared_machines_keep_models_in_a_set_with_constant_time_membership() -> None:
    from machines.build import ModelSet

    guards = {name: (lambda _: True) for name in REQUEST.guard_names}
    shared = generated(REQUEST)
    for machine in shared.values():
        assert isinstance(machine.models, ModelSet)
    bound = BoundMachine(REQUEST, guards)
    assert all(bound.model in machine.models for machine in shared.values())
    bound.unbind()
    assert not any(bound.model in machine.models for machine in shared.values())
    with pytest.raises(ValueError, match="not bound"):
        shared["phase"].models.remove(bound.model)


def test_unbinding_releases_the_host_and_keeps_the_states_readable() -> None:
    guards = {name: (lambda _: True) for name in REQUEST.guard_names}
    host = object()
    bound = BoundMachine(REQUEST, guards, host=host)
    bound.fire("start")
    bound.unbind()
    assert bound.model.host is None
    assert bound.states == {"phase": "setup", "mode": "normal"}


def test_triggers_go_through_transitions_event_trigger_and_evaluate_guards() -> None:
    from transitions import Event

    checked: list[str] = []

    def ok(event: object) -> bool:
        checked.append("ok")
        return True

    machine = BoundMachine(tiny(conditions="ok"), {"ok": ok})
    event = machine._machines["main"].events["go"]
    assert isinstance(event, Event)
    assert type(event).trigger is Event.trigger
    machine.fire("go")
    assert checked == ["ok"]


def _configured_log(machine_class: type) -> list[str]:
    """Every kind of callback transitions offers, recorded in the order the machine runs them."""
    log: list[str] = []

    def note(name: str) -> object:
        return lambda event: log.append(name)

    class Model:
        pass

    model = Model()
    machine = machine_class(
        states=[
            {"name": "a", "on_exit": [note("exit a")]},
            {"name": "b", "on_enter": [note("enter b")], "final": True},
        ],
        initial="a",
        auto_transitions=False,
        send_event=True,
        prepare_event=[note("prepare_event")],
        before_state_change=[note("before_state_change")],
        after_state_change=[note("after_state_change")],
        finalize_event=[note("finalize_event")],
        on_final=[note("on_final")],
        **({"model": None} if machine_class.__name__ == "Machine" else {}),
    )
    machine.add_model(model)
    machine.add_transition(
        "go",
        "a",
        "b",
        conditions=[lambda event: log.append("condition") or True],
        unless=[lambda event: log.append("unless") or False],
        prepare=[note("prepare")],
        before=[note("before")],
        after=[note("after")],
    )
    assert machine.events["go"].trigger(model)
    assert model.state == "b"
    return log


def test_the_lean_machine_runs_configured_callbacks_as_transitions_does() -> None:
    from transitions import Machine

    from machines.build import _LeanMachine

    expected = _configured_log(Machine)
    assert "enter b" in expected and "on_final" in expected
    assert _configured_log(_LeanMachine) == expected


def test_an_unbound_machine_takes_no_more_triggers() -> None:
    from machines import Unbound

    machine = BoundMachine(tiny(), {})
    machine.unbind()
    with pytest.raises(Unbound, match="after the machine was unbound"):
        machine.fire("go")
    with pytest.raises(Unbound):
        machine.may("go")
    assert machine.state() == "a"


@pytest.mark.parametrize("verdict", [True, False])
def test_may_answers_as_transitions_own_can_trigger_for_every_state_and_trigger(verdict: bool) -> None:
    """The lean ``_can_trigger`` reads one state's edges; transitions' own lists every trigger first."""
    from transitions import Machine

    from machines.registry import all_definitions

    checked = 0
    for definition in all_definitions().values():
        guards = {name: (lambda _event, v=verdict: v) for name in definition.guard_names}
        bound = BoundMachine(definition, guards)
        for region in definition.regions:
            machine = generated(definition)[region.name]
            for state in region.state_names:
                setattr(bound.model, region.attribute, state)
                for trigger in region.triggers:
                    expected = Machine._can_trigger(machine, bound.model, trigger)
                    assert bound.may(trigger) is expected, (definition.name, state, trigger)
                    checked += 1
        bound.unbind()
    assert checked > 400


def test_machines_of_one_definition_share_the_step_of_an_edge() -> None:
    from machines.build import Step

    guards = {name: (lambda _: True) for name in REQUEST.guard_names}
    first, second = BoundMachine(REQUEST, guards), BoundMachine(REQUEST, guards)
    taken, _ = first.fire("start")
    again, _ = second.fire("start")
    assert again is taken
    assert taken == Step("request", "phase", REQUEST.main.initial, "start", first.state())
    assert first.history == second.history == [taken]
    first.unbind()
    second.unbind()

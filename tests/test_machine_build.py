"""Definitions are validated, and bound machines behave as transitions machines."""

from __future__ import annotations

import pytest

from machines import REQUEST, BoundMachine, GuardRefused, IllegalTransition, MachineDefinition, Region, State, Transition
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

"""Declarative state machine definitions and their ``transitions`` builder."""

from machines.build import BoundMachine, GuardRefused, IllegalTransition, Step, Unbound, generated
from machines.definition import MachineDefinition, Region, State, Transition
from machines.request import REQUEST

__all__ = [
    "REQUEST",
    "BoundMachine",
    "GuardRefused",
    "IllegalTransition",
    "MachineDefinition",
    "Region",
    "State",
    "Step",
    "Transition",
    "Unbound",
    "generated",
]

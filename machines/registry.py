"""Every machine definition in the ``machines`` package, found by scanning it."""

from __future__ import annotations

import importlib
import pkgutil

import machines
from machines.definition import MachineDefinition


def all_definitions() -> dict[str, MachineDefinition]:
    """Definitions by name, from every module of ``machines``, sorted by name."""
    found: dict[str, MachineDefinition] = {}
    for info in pkgutil.iter_modules(machines.__path__):
        module = importlib.import_module(f"machines.{info.name}")
        for value in vars(module).values():
            if isinstance(value, MachineDefinition):
                existing = found.setdefault(value.name, value)
                if existing is not value:
                    raise ValueError(f"two machine definitions are named {value.name!r}")
    return dict(sorted(found.items()))

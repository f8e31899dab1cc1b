"""The design floor of a turn: bare ``transitions`` triggers, each with one guard.

A request machine edge cannot cost less than ``transitions``' own
``Event.trigger`` of an edge with one guard: a default ``transitions.Machine``
(as its documentation builds one) bound to one plain model, with two states and
an edge each way, each edge guarded by one condition that holds. The per-turn
workload multiplies this by the edges a turn fires.
"""

from __future__ import annotations

import time
from typing import Any

from transitions import EventData, Machine


class Model:
    """A plain object whose ``state`` the machine sets."""


def _holds(event: EventData) -> bool:
    return True


def trigger(count: int, repeats: int) -> dict[str, Any]:
    """Seconds per trigger: ``repeats`` samples of ``count`` triggers (after a warm-up)."""
    model = Model()
    machine = Machine(model=model, states=["a", "b"], initial="a", send_event=True)
    machine.add_transition("go", "a", "b", conditions=[_holds])
    machine.add_transition("back", "b", "a", conditions=[_holds])
    go, back = machine.events["go"].trigger, machine.events["back"].trigger
    seconds: list[float] = []
    for repeat in range(repeats + 1):
        started = time.perf_counter()
        for _ in range(count // 2):
            go(model)
            back(model)
        if repeat:
            seconds.append((time.perf_counter() - started) / (count // 2 * 2))
    assert model.state == "a"  # type: ignore[attr-defined]
    return {"count": count, "seconds_per_trigger": seconds}

"""What became of an external event: who took it, and why the others declined.

An extension answers ``consider(config, event)`` with True (it took the
event), False (the event is not for it: it says nothing), or a ``Refusal``
whose reason says why it looked at the event and declined. ``Agent.deliver``
collects the answers into a ``Delivery``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

import attrs

from machines.values import FieldValues
from orchestrator.checks import text


@attrs.frozen(eq=False, repr=False)
class Refusal(FieldValues):
    """An extension looked at an event and declined it; ``reason`` is short and says why."""

    reason: str = attrs.field(validator=text())

    def __bool__(self) -> bool:
        return False


Verdict: TypeAlias = bool | Refusal
"""True: taken. False: not for this extension. Refusal: looked at and declined."""


@attrs.frozen(eq=False, repr=False)
class Delivery(FieldValues):
    """The outcome of ``Agent.deliver``; true when at least one extension took the event.

    ``refused`` maps the name of each extension that looked at the event and
    declined it to its reason; extensions the event was not meant for are not
    listed.
    """

    event: str
    accepted: tuple[str, ...] = ()
    refused: Mapping[str, str] = attrs.field(factory=dict)

    def __bool__(self) -> bool:
        return bool(self.accepted)

    @property
    def reason(self) -> str:
        """One line saying why nobody took the event ('' once someone did)."""
        if self.accepted:
            return ""
        if not self.refused:
            return f"no extension takes {self.event!r} events"
        return "; ".join(f"{name}: {reason}" for name, reason in self.refused.items())

"""The base of every event (``AgentEvent``) and the free-form event of extensions (``ExtensionEvent``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from machines.values import FieldValues

__all__ = ["AgentEvent", "ExtensionEvent"]

_ENVELOPE_FIELDS = frozenset({"session_id", "request_id", "seq", "ts"})


@attrs.frozen(kw_only=True, eq=False, repr=False, match_args=False)
class AgentEvent(FieldValues):
    """Base of all events; subclasses set ``kind``.

    Its ``__repr__``, ``__eq__`` and ``__hash__`` (``FieldValues``) read every
    field of the concrete class, so subclasses are declared with ``repr=False,
    eq=False``: one method each instead of one generated (and compiled) per
    class. Equality is what attrs gives: same class, every field equal; the hash
    agrees with it. Every field is a keyword argument, so there are no
    positional match patterns (``match_args=False``).
    """

    kind: ClassVar[str] = "event"
    session_id: str = ""
    request_id: str = ""
    seq: int = 0
    ts: float = 0.0

    @property
    def name(self) -> str:
        return self.kind

    @property
    def payload(self) -> Mapping[str, Any]:
        return {
            field.name: getattr(self, field.name)
            for field in attrs.fields(type(self))
            if field.name not in _ENVELOPE_FIELDS
        }


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class ExtensionEvent(AgentEvent):
    """A custom event with a free name and payload, emitted by an extension."""

    name: str
    payload: Mapping[str, Any] = attrs.field(factory=dict)

"""Per-request configuration and events delivered from outside a request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from machines.values import FieldValues
from orchestrator.checks import mapping, number, of_type, text
from orchestrator.limits import UsageLimits
from orchestrator.model import ModelSettings
from orchestrator.output import OutputType, output_type


def _encodable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An id names rows, files and wire lines: it must encode as UTF-8 (no lone surrogates)."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as bad:
            raise ValueError(
                f"{attribute.name} must encode as UTF-8; {value!r} has a lone surrogate at {bad.start}"
            ) from None


@attrs.frozen(eq=False, repr=False)
class AgentRunConfig(FieldValues):
    """Which session a request or an external event belongs to, what the request overrides, and its bounds.

    Ids that are not str raise TypeError, and ids that cannot be encoded as UTF-8
    ValueError, here, before any store, log or wire line sees them. ``model_settings``
    take the place of the agent's for this request (each setting that is not None);
    ``output_type`` (a type, a JSON Schema dict or an OutputType) takes the place of the agent's;
    ``usage_limits`` replaces the agent's for this run; ``deadline`` (seconds) bounds the time the
    request runs, time spent waiting for people's answers not counted.
    """

    session_id: str = attrs.field(default="default", validator=[text(), _encodable])
    request_id: str | None = attrs.field(default=None, validator=[text(optional=True), _encodable])
    usage_limits: UsageLimits | None = attrs.field(
        default=None, validator=of_type(UsageLimits, "a UsageLimits", optional=True), kw_only=True
    )
    deadline: float | None = attrs.field(default=None, validator=number(above=0, optional=True), kw_only=True)
    model_settings: ModelSettings | None = attrs.field(
        default=None, validator=of_type(ModelSettings, "a ModelSettings", optional=True)
    )
    output_type: OutputType | None = attrs.field(default=None, converter=output_type)


@attrs.frozen(eq=False, repr=False)
class ExternalEvent(FieldValues):
    """An event from the application (a UI answer, a steering message)."""

    name: str = attrs.field(validator=text(blank=False))
    payload: Mapping[str, Any] = attrs.field(factory=dict, validator=mapping())

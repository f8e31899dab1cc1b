"""Per-request configuration and events delivered from outside a request."""

from __future__ import annotations

import math
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


#: The most bytes a run's ``metadata`` may take, encoded as JSON (it is stored with the run and sent in its events).
METADATA_LIMIT = 16 * 1024


class NotJSON(ValueError):
    """A value that must be JSON data is not: ``path`` names the bad part, ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class MetadataError(NotJSON):
    """``AgentRunConfig.metadata`` is not a small JSON object."""


def json_data(value: object, path: str) -> Any:
    """A copy of ``value`` made of JSON types only (dict with str keys, list, str, int, float, bool, None), or NotJSON.

    ``path`` names ``value`` in the error (``metadata.user.id``).
    """
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise NotJSON(path, "a string with a lone surrogate does not encode as UTF-8") from None
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSON(path, f"{value!r} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        copied: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJSON(path, f"keys must be strings, got {type(key).__name__} {key!r}")
            copied[key] = json_data(item, f"{path}.{key}")
        return copied
    if isinstance(value, (list, tuple)):
        return [json_data(item, f"{path}[{index}]") for index, item in enumerate(value)]
    raise NotJSON(path, f"{type(value).__name__} is not a JSON type (object, array, string, number, bool, null)")


def _metadata(value: object) -> Mapping[str, Any]:
    """The metadata as a JSON object of at most ``METADATA_LIMIT`` encoded bytes, copied, or MetadataError."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"metadata must be a mapping, got {type(value).__name__}")
    if not value:
        return {}
    try:
        copied = json_data(value, "metadata")
    except NotJSON as bad:
        raise MetadataError(bad.path, bad.reason) from None
    except RecursionError:
        raise MetadataError("metadata", "nested too deeply") from None
    import json  # on first use: importing the package loads no JSON codec

    size = len(json.dumps(copied, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > METADATA_LIMIT:
        raise MetadataError("metadata", f"{size} bytes as JSON, more than the {METADATA_LIMIT} allowed")
    assert isinstance(copied, dict)
    return copied


@attrs.frozen(eq=False, repr=False)
class AgentRunConfig(FieldValues):
    """Which session a request or event belongs to, its metadata, what the request overrides, and its bounds.

    Ids that are not str raise TypeError, and ids that cannot be encoded as UTF-8
    ValueError, here, before any store, log or wire line sees them. ``metadata`` is a
    JSON object (at most ``METADATA_LIMIT`` bytes encoded; anything else raises
    ``MetadataError``) that hooks and tools read as ``context.metadata``; it is sent in
    the request's ``run_started`` event and stored with a durable run. ``model_settings``
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
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_metadata, hash=False)


@attrs.frozen(eq=False, repr=False)
class ExternalEvent(FieldValues):
    """An event from the application (a UI answer, a steering message)."""

    name: str = attrs.field(validator=text(blank=False))
    payload: Mapping[str, Any] = attrs.field(factory=dict, validator=mapping())

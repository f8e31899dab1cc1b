"""Typed reads of the JSON a provider streams.

Every field of a decoded stream event is read through ``Fields``: a field of the
wrong type raises MalformedStreamError naming the field, so a hostile or broken
stream never reaches the assemblers as a TypeError, KeyError or ValueError.
A missing field and an explicit ``null`` read alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from orchestrator.providers.errors import MalformedStreamError, ProviderError, error_from_type
from orchestrator.text import clean_text

__all__ = ["Fields", "decode_object", "stream_error"]


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


class Fields:
    """One JSON object of a stream, read with its field types checked.

    ``where`` names the object in error messages (``choices[0].delta``).
    """

    __slots__ = ("data", "where")

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def wrong(self, key: str, expected: str) -> MalformedStreamError:
        """The error for field ``key`` not being ``expected``."""
        return MalformedStreamError(f"{self._path(key)} should be {expected}, got {_preview(self.data.get(key))}")

    def raw(self, key: str) -> Any:
        """The field's value as decoded, unchecked (None when missing)."""
        return self.data.get(key)

    def text(self, key: str) -> str | None:
        """A string field, or None."""
        value = self.data.get(key)
        if value is None or isinstance(value, str):
            return value
        raise self.wrong(key, "a string")

    def required_text(self, key: str) -> str:
        """A string field that must be present."""
        value = self.text(key)
        if value is None:
            raise self.wrong(key, "a string")
        return value

    def index(self, key: str) -> int | None:
        """A non-negative integer field (a position), or None."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        raise self.wrong(key, "a non-negative integer")

    def required_index(self, key: str) -> int:
        """A non-negative integer field that must be present."""
        value = self.index(key)
        if value is None:
            raise self.wrong(key, "a non-negative integer")
        return value

    def count(self, key: str) -> int:
        """A token count: a non-negative integer, 0 when missing."""
        return self.index(key) or 0

    def identifier(self, key: str) -> str | None:
        """An id: a non-empty string, or a number as its string; None when missing or empty."""
        value = self.data.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, str):
            return clean_text(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, float) and math.isfinite(value):
            return repr(value)
        raise self.wrong(key, "a string or a number")

    def obj(self, key: str) -> Fields:
        """An object field; an empty one when missing."""
        value = self.data.get(key)
        if value is None:
            return Fields({}, self._path(key))
        if isinstance(value, dict):
            return Fields(value, self._path(key))
        raise self.wrong(key, "an object")

    def has(self, key: str) -> bool:
        """Whether the field is present and not null."""
        return self.data.get(key) is not None

    def objects(self, key: str) -> Iterator[Fields]:
        """The objects of an array field (none when missing)."""
        value = self.data.get(key)
        if value is None:
            return
        if not isinstance(value, list):
            raise self.wrong(key, "an array")
        for position, item in enumerate(value):
            if not isinstance(item, dict):
                raise MalformedStreamError(f"{self._path(key)}[{position}] should be an object, got {_preview(item)}")
            yield Fields(item, f"{self._path(key)}[{position}]")

    def __bool__(self) -> bool:
        return bool(self.data)


def decode_object(data: str) -> Fields:
    """The JSON object in an event's data."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise MalformedStreamError(f"event data is not JSON: {data[:200]!r}") from error
    if not isinstance(value, dict):
        raise MalformedStreamError(f"event data is not a JSON object: {data[:200]!r}")
    return Fields(value, "")


def stream_error(value: Any, *, body: str | None = None) -> ProviderError:
    """The typed error for an ``error`` value sent inside a stream (an object or a string)."""
    if isinstance(value, dict):
        kind = value.get("type") or value.get("code")
        message = value.get("message")
        return error_from_type(
            clean_text(str(kind)) if kind is not None else None,
            clean_text(str(message)) if message is not None else _preview(value),
            body=body,
        )
    return error_from_type(None, clean_text(str(value)), body=body)

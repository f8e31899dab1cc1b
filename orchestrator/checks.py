"""Checks of the values users construct: a wrong type raises TypeError, a bad value ValueError, naming the field.

Each check is an attrs validator (``attrs.field(validator=whole(1))``) and can
also check a constructor's argument (``whole(1).check("Agent.max_iterations",
value)``). The messages read ``ToolDefinition.name must be a str, got int`` and
``RetryPolicy.max_retries must be at least 0, got -1``. ``bool`` is never taken
for a number. Values the runtime builds itself (events, deltas, copies through
``machines.frozen.constructor(..., checked=False)``) do not pass through these.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any


class Check:
    """One check of a field: ``check(where, value)`` raises TypeError or ValueError, naming ``where``."""

    __slots__ = ("_test",)

    def __init__(self, test: Callable[[str, Any], None]) -> None:
        self._test = test

    def check(self, where: str, value: Any) -> None:
        self._test(where, value)

    def __call__(self, instance: object, attribute: Any, value: Any) -> None:
        """As an attrs validator: the field is named ``Class.field``."""
        self._test(f"{type(instance).__qualname__}.{attribute.name}", value)


def _type_name(value: object) -> str:
    return type(value).__name__


def of_type(kinds: type | tuple[type, ...], what: str, *, optional: bool = False) -> Check:
    """An instance of ``kinds`` (described as ``what``), or None when ``optional``."""

    def test(where: str, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, kinds):
            also = " or None" if optional else ""
            raise TypeError(f"{where} must be {what}{also}, got {_type_name(value)}")

    return Check(test)


def text(*, optional: bool = False, blank: bool = True) -> Check:
    """A str (not blank, unless ``blank``), or None when ``optional``."""

    def test(where: str, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str):
            raise TypeError(f"{where} must be a str{' or None' if optional else ''}, got {_type_name(value)}")
        if not blank and not value.strip():
            raise ValueError(f"{where} must not be blank, got {value!r}")

    return Check(test)


def flag() -> Check:
    """A bool (not merely truthy)."""

    def test(where: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"{where} must be a bool, got {_type_name(value)}")

    return Check(test)


def whole(minimum: int | None = None, *, optional: bool = False) -> Check:
    """An int (not a bool) of at least ``minimum``, or None when ``optional``."""

    def test(where: str, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{where} must be an int{' or None' if optional else ''}, got {_type_name(value)}")
        if minimum is not None and value < minimum:
            raise ValueError(f"{where} must be at least {minimum}, got {value!r}")

    return Check(test)


def number(
    minimum: float | None = None, *, above: float | None = None, maximum: float | None = None, optional: bool = False
) -> Check:
    """A finite int or float (not a bool): at least ``minimum``, more than ``above``, at most ``maximum``."""

    def test(where: str, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"{where} must be a number{' or None' if optional else ''}, got {_type_name(value)}")
        if not math.isfinite(value):
            raise ValueError(f"{where} must be finite, got {value!r}")
        if minimum is not None and value < minimum:
            raise ValueError(f"{where} must be at least {minimum}, got {value!r}")
        if above is not None and value <= above:
            raise ValueError(f"{where} must be more than {above}, got {value!r}")
        if maximum is not None and value > maximum:
            raise ValueError(f"{where} must be at most {maximum}, got {value!r}")

    return Check(test)


def path_like() -> Check:
    """A str or os.PathLike (a file system path)."""

    def test(where: str, value: Any) -> None:
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{where} must be a str or os.PathLike path, got {_type_name(value)}")

    return Check(test)


def mapping(*, optional: bool = False) -> Check:
    """A mapping (its items are not read here), or None when ``optional``."""

    def test(where: str, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, Mapping):
            raise TypeError(f"{where} must be a mapping{' or None' if optional else ''}, got {_type_name(value)}")

    return Check(test)


def function(*, optional: bool = False) -> Check:
    """A callable, or None when ``optional``."""

    def test(where: str, value: Any) -> None:
        if value is None and optional:
            return
        if not callable(value):
            raise TypeError(f"{where} must be callable{' or None' if optional else ''}, got {_type_name(value)}")

    return Check(test)


def items(kinds: type | tuple[type, ...], what: str) -> Check:
    """A tuple whose every item is an instance of ``kinds`` (described as ``what``)."""

    def test(where: str, value: Any) -> None:
        if not isinstance(value, tuple):
            raise TypeError(f"{where} must be a tuple of {what}, got {_type_name(value)}")
        for index, item in enumerate(value):
            if not isinstance(item, kinds):
                raise TypeError(f"{where}[{index}] must be {what}, got {_type_name(item)}")

    return Check(test)


def each(kinds: type | tuple[type, ...], what: str, where: str, values: Any) -> list[Any]:
    """``values`` (an iterable, not a str) as a list, each an instance of ``kinds``; for constructor arguments."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{where} must be an iterable of {what}, got {_type_name(values)}")
    found = list(values)
    for index, item in enumerate(found):
        if not isinstance(item, kinds):
            raise TypeError(f"{where}[{index}] must be {what}, got {_type_name(item)}")
    return found

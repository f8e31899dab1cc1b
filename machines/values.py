"""One ``__eq__``, ``__hash__`` and ``__repr__`` shared by the library's attrs value classes.

attrs writes these three methods for every class it builds and compiles them,
which is most of what building a class costs (and building classes is most of
what ``import orchestrator`` costs). A class declared
``@attrs.frozen(eq=False, repr=False)`` that inherits ``FieldValues`` behaves
as attrs' own methods would, from one implementation (a class that compares by
identity, ``eq=False``, or keeps attrs' cached hash, ``cache_hash=True``,
inherits ``FieldRepr`` for the repr alone):

- ``a == b`` when both are of the same class and every field attrs compares
  (``eq=True``) is equal, in declaration order; another class gives
  ``NotImplemented`` (so ``!=`` and comparisons with other types work as usual);
- ``hash`` combines the class and the fields attrs hashes, so equal values hash
  alike (a field holding a dict makes the value unhashable, as with attrs);
- ``repr`` is ``Name(field=value, ...)`` over the fields attrs shows.
"""

from __future__ import annotations

from typing import Any

import attrs


class FieldRepr:
    """Mixin of attrs' ``__repr__``, reading the fields of the concrete class."""

    __slots__ = ()

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{field.name}={(field.repr if callable(field.repr) else repr)(getattr(self, field.name, attrs.NOTHING))}"
            for field in _fields(self)
            if field.repr
        )
        return f"{self.__class__.__qualname__.rsplit('>.', 1)[-1]}({shown})"


class FieldValues(FieldRepr):
    """Mixin of attrs' ``__eq__``, ``__hash__`` and ``__repr__``, reading the fields of the concrete class."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, field.name) == getattr(other, field.name) for field in _fields(self) if field.eq)

    def __hash__(self) -> int:
        return hash((self.__class__, *[getattr(self, field.name) for field in _fields(self) if _hashed(field)]))


def _fields(value: FieldRepr) -> tuple[attrs.Attribute[Any], ...]:
    fields: tuple[attrs.Attribute[Any], ...] = value.__attrs_attrs__  # type: ignore[attr-defined]
    return fields


def _hashed(field: attrs.Attribute[Any]) -> bool:
    """Whether attrs hashes ``field``: ``hash=True``, or compared and not excluded from the hash."""
    return bool(field.hash or (field.hash is None and field.eq))

"""Build instances of frozen, slotted attrs classes faster than their ``__init__``.

A frozen attrs class refuses ``__setattr__``, so its generated ``__init__``
stores each field through ``object.__setattr__``. ``constructor(cls)`` returns a
function with the same keyword parameters and defaults that makes the instance
with ``object.__new__`` and stores each field through its slot's descriptor:
the same object (equal, hashed and printed alike, still frozen) at about half
the cost. The request loop builds several such values per step (its events,
each ``Step`` of a machine), which is what it is for.

A class whose construction does more than store fields (validators,
converters, ``__attrs_pre_init__``/``__attrs_post_init__``, a class without
slots) gets the class itself back, so a constructor is always safe to call.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

_HOOKS = ("__attrs_pre_init__", "__attrs_post_init__")


def constructor(cls: type[T], *, positional: bool = False) -> Callable[..., T]:
    """A function taking ``cls``'s init keywords that builds the same instance (or ``cls`` itself).

    ``positional``: the function takes every field positionally, in the order of
    ``attrs.fields(cls)``, none of them optional (cheaper to call, for the hottest
    paths); ``cls`` must then be plain, or a TypeError says why not.
    """
    if not _plain(cls):
        if positional:
            raise TypeError(f"{cls.__qualname__} does more than store its fields: it has no positional constructor")
        return cls
    fields = attrs.fields(typing.cast(Any, cls))
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_NOTHING": attrs.NOTHING}
    params: list[str] = []
    body: list[str] = ["    self = _new(_cls)"]
    for index, field in enumerate(fields):
        name = field.alias
        namespace[f"_set{index}"] = getattr(cls, field.name).__set__
        default = field.default
        if positional or default is attrs.NOTHING:
            params.append(name)
        elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            params.append(f"{name}=_NOTHING")
            namespace[f"_factory{index}"] = default.factory
            made = f"_factory{index}(self)" if default.takes_self else f"_factory{index}()"
            body.append(f"    if {name} is _NOTHING:")
            body.append(f"        {name} = {made}")
        else:
            namespace[f"_default{index}"] = default
            params.append(f"{name}=_default{index}")
        body.append(f"    _set{index}(self, {name})")
    body.append("    return self")
    signature = f"{', '.join(params)}, /" if positional else f"*, {', '.join(params)}"
    source = f"def build({signature}):\n" + "\n".join(body) + "\n"
    exec(compile(source, f"<constructor of {cls.__qualname__}>", "exec"), namespace)
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = f"constructor({cls.__qualname__})"
    return build


def _plain(cls: type) -> bool:
    """Whether building ``cls`` only stores its fields in slots."""
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        return False
    if any(getattr(cls, hook, None) is not None for hook in _HOOKS):
        return False
    for field in attrs.fields(cls):
        if field.validator is not None or field.converter is not None or not field.init:
            return False
        if type(getattr(cls, field.name, None)).__name__ != "member_descriptor":
            return False
    return True

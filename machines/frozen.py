"""Build instances of slotted attrs classes (frozen ones above all) faster than their ``__init__``.

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

``checked=False`` is for values already checked: a copy of an instance's own
fields, or a value the caller makes in the form the class's converters would
give it. The constructor then skips validators and converters (hooks are still
refused), so it must never see a value from outside.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

_HOOKS = ("__attrs_pre_init__", "__attrs_post_init__")


def constructor(cls: type[T], *, positional: bool = False, checked: bool = True) -> Callable[..., T]:
    """A function taking ``cls``'s init keywords that builds the same instance (or ``cls`` itself).

    ``positional``: the function takes every field positionally, in the order of
    ``attrs.fields(cls)``, none of them optional (cheaper to call, for the hottest
    paths); ``cls`` must then be plain, or a TypeError says why not.
    ``checked=False``: validators and converters are skipped (see the module's
    note); a field that is not an init parameter gets its default.
    """
    problem = _problem(cls, checked)
    if problem is not None:
        if positional or not checked:
            kind = "positional" if checked else "unchecked"
            raise TypeError(f"{cls.__qualname__} {problem}: it has no {kind} constructor")
        return cls
    fields = attrs.fields(typing.cast(Any, cls))
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_NOTHING": attrs.NOTHING}
    params: list[str] = []
    body: list[str] = ["    self = _new(_cls)"]
    for index, field in enumerate(fields):
        name = field.alias
        namespace[f"_set{index}"] = getattr(cls, field.name).__set__
        default = field.default
        if not field.init:
            namespace[f"_default{index}"] = default
            body.append(f"    _set{index}(self, _default{index})")
            continue
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


def _problem(cls: type, checked: bool) -> str | None:
    """Why building ``cls`` does more than store its fields in slots (None: it does not).

    Unchecked, validators and converters do not count, and a field that is not
    an init parameter is stored with its default if that is a plain value.
    """
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        return "is not a slotted attrs class"
    if any(getattr(cls, hook, None) is not None for hook in _HOOKS):
        return "has an __attrs_pre_init__ or __attrs_post_init__"
    for field in attrs.fields(cls):
        if checked and (field.validator is not None or field.converter is not None):
            return f"checks or converts its field {field.name}"
        if not field.init and (checked or not _plain_default(field)):
            return f"makes its field {field.name} itself"
        if type(getattr(cls, field.name, None)).__name__ != "member_descriptor":
            return f"keeps its field {field.name} outside a slot"
    return None


def _plain_default(field: attrs.Attribute[Any]) -> bool:
    return field.default is not attrs.NOTHING and not isinstance(field.default, attrs.Factory)  # type: ignore[arg-type]

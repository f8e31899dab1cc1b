"""Which event loop a tool or an extension hook runs on, when a request has an application's asyncio loop.

A request started through an ``AgentHost`` from asyncio code has that code's loop (its
*app loop*). There, a coroutine tool or hook runs on the app loop when it says
``"asyncio"``, on the request's trio loop when it says ``"trio"``, and by the rule of
``"auto"`` (the default) when it says neither: a coroutine function defined outside the
``orchestrator`` package runs on the app loop, the library's own run on trio. A request
with no app loop (a plain ``trio.run``, the trio server, a cluster worker) runs everything
on trio, whatever the choice.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Literal, TypeVar

Loop = Literal["auto", "trio", "asyncio"]
LOOPS: tuple[str, ...] = ("auto", "trio", "asyncio")

#: The attribute ``runs_on`` sets on a function.
LOOP_ATTRIBUTE = "__orchestrator_loop__"

_F = TypeVar("_F", bound=Callable[..., Any])


def check_loop(where: str, value: object) -> None:
    """Raise TypeError or ValueError unless ``value`` is one of ``LOOPS``."""
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a str, got {type(value).__name__}")
    if value not in LOOPS:
        raise ValueError(f"{where} must be one of {', '.join(LOOPS)}; got {value!r}")


def runs_on(loop: Loop) -> Callable[[_F], _F]:
    """Mark an ``async def`` hook (or tool function) to run on ``loop``: ``"asyncio"``, ``"trio"`` or ``"auto"``."""
    check_loop("runs_on's loop", loop)

    def mark(fn: _F) -> _F:
        if loop == "asyncio" and not is_coroutine_function(fn):
            raise TypeError(f"{getattr(fn, '__name__', fn)!r}: only an async def function can run on asyncio")
        setattr(fn, LOOP_ATTRIBUTE, loop)
        return fn

    return mark


def is_coroutine_function(fn: object) -> bool:
    """Whether calling ``fn`` makes a coroutine (partials and bound methods of ``async def`` included)."""
    return inspect.iscoroutinefunction(fn)


def _defined_in(fn: object) -> str:
    """The module that defines ``fn`` (through partials, bound methods and ``functools.wraps``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    if callable(fn):
        fn = inspect.unwrap(fn)
    module = getattr(fn, "__module__", None)
    return module if isinstance(module, str) else ""


def library_code(fn: object) -> bool:
    """Whether ``fn`` is defined in the ``orchestrator`` package."""
    module = _defined_in(fn)
    return module == "orchestrator" or module.startswith("orchestrator.")


def declared_loop(fn: object, declared: str = "auto") -> str:
    """``declared`` unless it is ``"auto"`` and ``fn`` was marked with ``runs_on``."""
    if declared == "auto":
        marked = getattr(fn, LOOP_ATTRIBUTE, None)
        if isinstance(marked, str) and marked in LOOPS:
            return marked
    return declared


def wants_app_loop(fn: object, declared: str = "auto") -> bool:
    """Whether ``fn`` runs on a request's app loop (when it has one), by ``declared`` or the rule of ``"auto"``."""
    chosen = declared_loop(fn, declared)
    if chosen == "trio":
        return False
    if not is_coroutine_function(fn):
        return False
    return chosen == "asyncio" or not library_code(fn)


__all__ = [
    "LOOPS",
    "LOOP_ATTRIBUTE",
    "Loop",
    "check_loop",
    "declared_loop",
    "is_coroutine_function",
    "library_code",
    "runs_on",
    "wants_app_loop",
]

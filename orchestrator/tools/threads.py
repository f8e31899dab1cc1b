"""The threads tools run in: a limiter of their own, and the threads a timeout abandoned.

A ``thread=True`` tool runs in a worker thread under ``TOOL_THREADS`` slots, not
under trio's default limiter (which the stores and run claims share), so hung
tools cannot starve them. A cancelled call waits for its thread to return,
unless the call has a timeout: then the thread is abandoned (trio stops waiting
for it and drops its late result), but Python cannot stop the thread, so it
keeps its slot until it returns. ``abandoned_tool_threads()`` tells how many still run; each is logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

import trio

log = logging.getLogger("orchestrator.tools")

_T = TypeVar("_T")

#: How many tool threads may run at once in one trio run (abandoned ones included, until they return).
TOOL_THREADS = 40

_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("orchestrator_tool_threads")
_lock = threading.Lock()
_abandoned: set[int] = set()
_counter = iter(range(1, 2**62))


def tool_thread_limiter() -> trio.CapacityLimiter:
    """The limiter of tool threads in the current trio run (made on first use)."""
    try:
        return _LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(TOOL_THREADS)
        _LIMITER.set(limiter)
        return limiter


def abandoned_tool_threads() -> int:
    """How many tool threads were abandoned (their call cancelled) and have not returned yet."""
    with _lock:
        return len(_abandoned)


async def run_in_tool_thread(fn: Callable[[], _T], tool: str, *, abandon: bool = False) -> _T:
    """Run ``fn`` in a tool thread. Cancelled, wait for it to return; with ``abandon``, stop waiting (abandon it)."""
    ticket = next(_counter)
    started = finished = False

    def body() -> _T:
        nonlocal started, finished
        with _lock:
            started = True
        try:
            return fn()
        finally:
            with _lock:
                finished = True
                if ticket in _abandoned:
                    _abandoned.discard(ticket)
                    log.info("an abandoned thread of tool %r returned; its result was dropped", tool)

    try:
        return await trio.to_thread.run_sync(body, abandon_on_cancel=abandon, limiter=tool_thread_limiter())
    except trio.Cancelled:
        with _lock:
            started_and_running = started and not finished
            if started_and_running:
                _abandoned.add(ticket)
        if started_and_running:
            log.warning("tool %r: its thread was abandoned when its call was cancelled; it still runs", tool)
        raise


__all__ = ["TOOL_THREADS", "abandoned_tool_threads", "run_in_tool_thread", "tool_thread_limiter"]

"""Pieces every driver shares: memory probes and the steering emitter thread."""

from __future__ import annotations

import gc
import queue
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import attrs

from bench.measure import peak_rss_bytes, rss_bytes

APPROVAL_RESPONSE = "approval_response"
APPROVAL_REQUESTED = "approval_requested"
GUARDED_TOOL = "guarded"
CALL_ID = "call-1"


@attrs.define
class MemoryProbe:
    """RSS (and optionally traced allocations) before the sessions and while they wait."""

    trace: bool
    rss_before: int = 0
    traced_before: int = 0
    rss_waiting: int = 0
    traced_waiting: int = 0

    def start(self) -> None:
        gc.collect()
        if self.trace:
            tracemalloc.start()
            self.traced_before = tracemalloc.get_traced_memory()[0]
        self.rss_before = rss_bytes()

    def waiting(self) -> None:
        """Read memory while every session waits (collect garbage first)."""
        gc.collect()
        self.rss_waiting = rss_bytes()
        if self.trace:
            self.traced_waiting = tracemalloc.get_traced_memory()[0]

    def stop(self) -> None:
        if self.trace:
            tracemalloc.stop()


def session_figures(
    probe: MemoryProbe, sessions: int, fill_seconds: float, drain_seconds: float, **extra: Any
) -> dict[str, Any]:
    """The JSON result of a sessions workload."""
    figures: dict[str, Any] = {
        "sessions": sessions,
        "rss_before": probe.rss_before,
        "rss_waiting": probe.rss_waiting,
        "peak_rss": peak_rss_bytes(),
        "rss_per_session": (probe.rss_waiting - probe.rss_before) / sessions,
        "fill_seconds": fill_seconds,
        "drain_seconds": drain_seconds,
    }
    if probe.trace:
        figures["traced_per_session"] = (probe.traced_waiting - probe.traced_before) / sessions
    figures.update(extra)
    return figures


class Emitter:
    """A thread that sends each steering message, then wakes the waiting tool.

    ``submit(emit, wake)`` is called from the tool; the thread stamps the time,
    calls ``emit`` (which must return a truthy value when the message was
    accepted) and then ``wake`` so the tool can return. ``stamps`` maps each
    message text to its send time (``time.perf_counter``).
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[str, Callable[[], object], Callable[[], None]] | None] = queue.SimpleQueue()
        self.stamps: dict[str, float] = {}
        self.refused: list[str] = []
        self._thread = threading.Thread(target=self._serve, name="steering-emitter", daemon=True)
        self._thread.start()

    def submit(self, text: str, emit: Callable[[], object], wake: Callable[[], None]) -> None:
        self._jobs.put((text, emit, wake))

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            text, emit, wake = job
            self.stamps[text] = time.perf_counter()
            if not emit():
                self.refused.append(text)
            wake()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()


def latency_result(emitter: Emitter, seen: dict[str, float], runs: int) -> dict[str, Any]:
    """The JSON result of a steering workload: one latency per run that saw its message."""
    latencies = [seen[text] - emitter.stamps[text] for text in seen if text in emitter.stamps]
    return {"runs": runs, "latencies": latencies, "missed": runs - len(latencies), "refused": len(emitter.refused)}


def steering_text(index: int) -> str:
    return f"steer {index}"

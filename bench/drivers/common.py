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


# streaming and many concurrent sessions -------------------------------------------

#: The text of every streamed delta, in every runtime.
PIECE = "token "


class GcMeter:
    """CPU time spent in garbage collections while it is installed (``gc.callbacks``).

    Timed with ``time.process_time`` like the CPU it is a share of: a wall clock
    would count the time other processes took the CPU during a collection.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._started = 0.0

    def _note(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started
            self.collections[info["generation"]] += 1

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)


@attrs.define
class CpuClock:
    """Process CPU time, wall time and garbage collection over one measured stretch."""

    cpu_started: float = 0.0
    wall_started: float = 0.0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    meter: GcMeter = attrs.field(factory=GcMeter)

    def __enter__(self) -> CpuClock:
        self.meter.__enter__()
        self.cpu_started, self.wall_started = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu_seconds = time.process_time() - self.cpu_started
        self.wall_seconds = time.perf_counter() - self.wall_started
        self.meter.__exit__()


def concurrency_figures(clock: CpuClock, sessions: int, model_calls: int, deltas_seen: int) -> dict[str, Any]:
    """The JSON result of the concurrent-sessions workload."""
    return {
        "sessions": sessions,
        "model_calls": model_calls,
        "deltas_seen": deltas_seen,
        "cpu_seconds": clock.cpu_seconds,
        "wall_seconds": clock.wall_seconds,
        "cpu_per_call_us": clock.cpu_seconds / model_calls * 1e6,
        "gc_seconds": clock.meter.seconds,
        "gc_share": clock.meter.seconds / clock.cpu_seconds if clock.cpu_seconds > 0 else 0.0,
        "gc_collections": clock.meter.collections,
    }


class PeakMemory:
    """Peak traced allocations (tracemalloc) above the level when it started."""

    def __init__(self) -> None:
        self.baseline = 0
        self.peak = 0

    def __enter__(self) -> PeakMemory:
        gc.collect()
        tracemalloc.start()
        self.baseline = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = tracemalloc.get_traced_memory()[1] - self.baseline
        tracemalloc.stop()


def streaming_figures(deltas: int, seconds: list[float], seen: int, peak: int | None = None) -> dict[str, Any]:
    """The JSON result of the streaming workload."""
    figures: dict[str, Any] = {"deltas": deltas, "seconds": seconds, "deltas_seen": seen}
    if peak is not None:
        figures["peak_traced"] = peak
    return figures

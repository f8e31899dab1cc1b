"""Measurement helpers: summaries of samples and the process's memory."""

from __future__ import annotations

import math
import os
import resource
import statistics
from collections.abc import Sequence

import attrs


@attrs.frozen
class Summary:
    """Order statistics of a list of samples (same unit as the samples)."""

    count: int
    minimum: float
    median: float
    p99: float
    maximum: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Summary:
        if not samples:
            raise ValueError("no samples")
        ordered = sorted(samples)
        return cls(len(ordered), ordered[0], statistics.median(ordered), percentile(ordered, 99), ordered[-1])


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted samples."""
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int:
    """Resident set size now (VmRSS); the peak so far where /proc is unavailable."""
    kib = _status_kib("VmRSS")
    return (kib if kib is not None else peak_rss_bytes() // 1024) * 1024


def peak_rss_bytes() -> int:
    """Highest resident set size of this process so far."""
    kib = _status_kib("VmHWM")
    if kib is None:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


def pin(cpu: int | None) -> int | None:
    """Keep this process (and the processes it starts) on one CPU; the CPU, or None if not pinned."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    os.sched_setaffinity(0, {cpu})
    return cpu


def default_cpu() -> int | None:
    """The highest-numbered CPU this process may use (None where affinity is unknown)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))

"""``Retention``: how long ended runs, idle sessions and the memory of pruned runs are kept.

One value type for every place that prunes: a worker, a web node, and one process
serving an agent (``create_app(..., retention=...)``, ``serve --retention-hours``).
A run that is queued, running or waiting for an answer, and its session, are never pruned.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import attrs

from orchestrator.store.runs import PrunedRun, RunStore

__all__ = ["TOMBSTONE_SECONDS", "PruneReport", "PrunedRun", "Retention", "RetentionRefused", "prune_run_store"]

TOMBSTONE_SECONDS = 30 * 24 * 3600.0
"""How long a pruned run's request id is remembered by default (30 days): following it answers 410, not 404."""
LONGEST_PASS_GAP = 3600.0
"""The longest time between two prune passes, whatever the ages."""


class RetentionRefused(ValueError):
    """A retention setting that cannot be used: ``setting`` names it, ``value`` is what was given."""

    def __init__(self, setting: str, value: object) -> None:
        super().__init__(f"Retention.{setting} must be a number of seconds above 0 (or None to keep), got {value!r}")
        self.setting = setting
        self.value = value


def _age(optional: bool) -> Callable[[object, Any, object], None]:
    def check(_: object, attribute: Any, value: object) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
            raise RetentionRefused(attribute.name, value)

    return check


@attrs.frozen
class Retention:
    """Ages in seconds: ended runs (their events and inbox) go ``ended_runs_after`` their end, sessions
    ``idle_sessions_after`` their last activity; None keeps them. A pruned run's id is remembered
    ``tombstones_for`` (following it answers 410 meanwhile). A non-positive age is RetentionRefused."""

    ended_runs_after: float | None = attrs.field(default=None, validator=_age(True))
    idle_sessions_after: float | None = attrs.field(default=None, validator=_age(True))
    tombstones_for: float = attrs.field(default=TOMBSTONE_SECONDS, validator=_age(False))

    @classmethod
    def hours(cls, ended_runs: float | None = None, idle_sessions: float | None = None) -> Retention:
        """The same, with the ages given in hours (as the command line takes them)."""
        return cls(
            None if ended_runs is None else ended_runs * 3600,
            None if idle_sessions is None else idle_sessions * 3600,
        )

    @property
    def every(self) -> float:
        """How often a prune pass runs: a tenth of the shortest age, at most hourly."""
        ages = [age for age in (self.ended_runs_after, self.idle_sessions_after) if age is not None]
        return min([LONGEST_PASS_GAP, *(age / 10 for age in ages)])


@attrs.frozen
class PruneReport:
    """What one prune pass removed: how many ended runs, and the idle sessions (their ids)."""

    runs: int = 0
    sessions: tuple[str, ...] = ()


def prune_run_store(store: RunStore, retention: Retention, now: float | None = None) -> PruneReport:
    """One prune pass over a run store at ``now`` (default: the time); blocking, so call it from a thread.

    Ended runs and idle sessions past ``retention`` go (queued, running and parked runs and their
    sessions stay), and pruned runs remembered longer than ``retention.tombstones_for`` are forgotten."""
    now = time.time() if now is None else now
    runs = 0 if retention.ended_runs_after is None else store.prune(now - retention.ended_runs_after)
    idle = retention.idle_sessions_after
    sessions = () if idle is None else store.prune_sessions(now - idle)
    store.forget_pruned(now - retention.tombstones_for)
    return PruneReport(runs, tuple(sessions))

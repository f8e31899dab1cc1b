"""``ChangeFeed``: what changed in a run store since its consumer last looked, as wake-up hints.

A store tells each feed which (topic, request id) pairs a committed transaction
touched: ``RUN`` when a run's event log or status moved, ``INBOX`` when its inbox got
an item, ``WORK`` (request id ``""``) when a run became claimable. A feed that may
have missed something (its listener reconnected, another process wrote to a SQLite
file) is told ``everything``. Hints, never the truth: a woken reader reads the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import attrs

RUN = "run"
INBOX = "inbox"
WORK = "work"
TOPICS = (RUN, INBOX, WORK)


@attrs.frozen
class Changes:
    """The pairs changed since the last wait, or ``everything`` when anything may have."""

    keys: frozenset[tuple[str, str]] = frozenset()
    everything: bool = False

    def __bool__(self) -> bool:
        return self.everything or bool(self.keys)


class ChangeFeed:
    """One consumer's changes, filled by its store's threads; ``wait`` blocks a thread until there are some, and
    ``on_change`` (when ``pushes``) is called as soon as there are some, so a consumer needs no thread of its own."""

    pushes = True
    """Whether ``add`` tells its changes (a feed that polls finds them only in ``wait``)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._keys: set[tuple[str, str]] = set()
        self._everything = False
        self.closed = False
        # Which pairs its consumer wants to hear of (None: all); the others are dropped without waking it.
        self.wanted: Callable[[tuple[str, str]], bool] | None = None
        # Called in the adding thread when changes come while none waited to be taken (then ``take`` them).
        self.on_change: Callable[[], None] | None = None

    def add(self, keys: frozenset[tuple[str, str]] | set[tuple[str, str]], *, everything: bool = False) -> None:
        wanted = self.wanted
        if wanted is not None and not everything:
            keys = {key for key in keys if wanted(key)}
            if not keys:
                return
        with self._condition:
            first = not (self._keys or self._everything)
            self._keys |= keys
            self._everything = self._everything or everything
            self._condition.notify_all()
        on_change = self.on_change
        if first and on_change is not None:
            on_change()

    def wait(self, timeout: float) -> Changes:
        """The changes since the last call, as soon as there are some, or none after ``timeout`` seconds."""
        with self._condition:
            self._condition.wait_for(lambda: self._keys or self._everything or self.closed, timeout)
            return self._taken()

    def take(self) -> Changes:
        """The changes since the last call, without waiting (none when there are none)."""
        with self._condition:
            return self._taken()

    def _taken(self) -> Changes:
        changes = Changes(frozenset(self._keys), self._everything)
        self._keys, self._everything = set(), False
        return changes

    def close(self) -> None:
        with self._condition:
            self.closed = True
            self._condition.notify_all()


class PollingFeed(ChangeFeed):
    """For a store that cannot say what changed: ``everything`` after each ``interval``, as a poll would."""

    pushes = False

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__()
        self.interval = interval

    def wait(self, timeout: float) -> Changes:
        if self.closed:
            return Changes()
        time.sleep(min(timeout, self.interval))
        return Changes(everything=True)

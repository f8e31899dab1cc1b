"""``Wakeups``: one process's waits on a run store, woken by the store's change feed instead of each polling.

Tasks wait for a (topic, request id) pair: a held run for its inbox, an event stream
for its run's log, a claim loop for work. One task per trio run reads the store's feed
in a thread and sets exactly the events of the pairs that changed (all of them when
the feed says anything may have). ``arm`` before reading the store, then wait: a change
committed between the read and the wait still wakes the waiter.
"""

from __future__ import annotations

import logging

import trio

from orchestrator.store.changes import ChangeFeed
from orchestrator.store.runs import RunStore

log = logging.getLogger("orchestrator.cluster")

FEED_SECONDS = 1.0
"""Longest a feed read blocks its thread (so a stopped process leaves no thread waiting longer)."""


class Wakeups:
    """The waits of one process on ``store``, keyed by (topic, request id)."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._waiting: dict[tuple[str, str], trio.Event] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._feed: ChangeFeed | None = None
        self._thread: trio.CapacityLimiter | None = None

    def arm(self, topic: str, request_id: str = "") -> trio.Event:
        """The event set at the next change of ``request_id``'s ``topic`` (shared by every waiter of the pair)."""
        token = trio.lowlevel.current_trio_token()
        if self._token is not token:
            self._start(token)
        key = (topic, request_id)
        event = self._waiting.get(key)
        if event is None:
            event = self._waiting[key] = trio.Event()
        return event

    async def wait(self, topic: str, request_id: str, timeout: float) -> None:
        """Until the next change of the pair, or ``timeout`` seconds."""
        with trio.move_on_after(timeout):
            await self.arm(topic, request_id).wait()

    def _start(self, token: trio.lowlevel.TrioToken) -> None:
        if self._feed is not None:
            self._feed.close()
        self._token = token
        self._waiting = {}
        self._thread = trio.CapacityLimiter(1)  # its own: never waits behind store calls for one of trio's threads
        self._feed = feed = self.store.watch()
        trio.lowlevel.spawn_system_task(self._pump, feed, name=f"wake-ups of {self.store.where}")

    async def _pump(self, feed: ChangeFeed) -> None:
        try:
            while not feed.closed:
                changes = await trio.to_thread.run_sync(
                    feed.wait, FEED_SECONDS, abandon_on_cancel=True, limiter=self._thread
                )
                if feed is not self._feed:
                    return
                woken = list(self._waiting) if changes.everything else changes.keys & self._waiting.keys()
                for key in woken:
                    self._waiting.pop(key).set()
        except trio.Cancelled:
            raise
        except Exception:  # the waits fall back on their timeouts
            log.exception("wake-ups of %s stopped", self.store.where)
        finally:
            feed.close()

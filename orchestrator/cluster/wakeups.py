"""``Wakeups``: one process's waits on a run store, woken by the store's change feed instead of each polling.

Tasks wait for a (topic, request id) pair: a held run for its inbox, an event stream
for its run's log, a claim loop for work. The store's feed hands its changes to a trio loop
as they come (a feed that only polls, and an asyncio loop, read it with a task of the loop, in a
thread), and the loop sets exactly the events of the pairs that changed (all of them when the
feed says anything may have). ``arm`` before reading the store, then wait: a change committed
between the read and the wait still wakes the waiter.

The waits may live in a trio loop (a worker, a web node under hypercorn) or in an
asyncio one (a web node under uvicorn): the events and the feed's task are that loop's own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import sniffio
import trio

from orchestrator.store.changes import INBOX, ChangeFeed, Changes
from orchestrator.store.runs import RunStore

log = logging.getLogger("orchestrator.cluster")

FEED_SECONDS = 1.0
"""Longest a feed read blocks its thread (so a stopped process leaves no thread waiting longer)."""
RECENT_CHANGES = 256
"""How many of the latest deliveries of changes ``changed_since`` looks back over (before them, it says yes)."""


class Wakeup(Protocol):
    """What ``arm`` gives: set at the pair's next change (a ``trio.Event`` or an ``asyncio.Event``)."""

    def is_set(self) -> bool: ...
    def set(self) -> None: ...
    async def wait(self) -> object: ...


class Wakeups:
    """The waits of one process on ``store``, keyed by (topic, request id)."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._waiting: dict[tuple[str, str], Wakeup] = {}
        self._loop: object = None  # the trio token or asyncio loop the waits and the feed's task belong to
        self._feed: ChangeFeed | None = None
        self._asyncio_pump: asyncio.Task[None] | None = None  # held: a task nobody references may be collected
        # Each delivery of changes gets the next number; the latest are kept for ``changed_since``.
        self._delivered = 0
        self._recent: collections.deque[tuple[int, Changes]] = collections.deque(maxlen=RECENT_CHANGES)
        self._marking = False  # a mark was taken: every inbox's changes are kept for ``changed_since``

    def arm(self, topic: str, request_id: str = "") -> Wakeup:
        """The event set at the next change of ``request_id``'s ``topic`` (shared by every waiter of the pair)."""
        on_trio = sniffio.current_async_library() == "trio"
        loop: object = trio.lowlevel.current_trio_token() if on_trio else asyncio.get_running_loop()
        if self._loop is not loop:
            self._start(loop, on_trio)
        key = (topic, request_id)
        event = self._waiting.get(key)
        if event is None:
            event = self._waiting[key] = trio.Event() if on_trio else asyncio.Event()
        return event

    def forget(self, topic: str, request_id: str = "") -> None:
        """Let the pair's event go while no task waits on it: a waiter done with a pair only it waits for (the inbox
        of a run its carrier lets go) leaves nothing kept until the pair's next change, which may never come. An
        asyncio event, whose waiters cannot be told, is kept."""
        key = (topic, request_id)
        event = self._waiting.get(key)
        if isinstance(event, trio.Event) and event.statistics().tasks_waiting == 0:
            del self._waiting[key]

    def mark(self) -> int:
        """Where the changes told so far end: take it before reading the store, and ask ``changed_since`` later."""
        self._marking = True
        return self._delivered

    def changed_since(self, mark: int, topic: str, request_id: str = "") -> bool:
        """Whether a change of ``request_id``'s ``topic`` (or of anything) was told since ``mark``; True when the
        changes since then are no longer all kept."""
        if mark < self._delivered - len(self._recent):
            return True
        key = (topic, request_id)
        for number, changes in reversed(self._recent):  # the latest first: only those after the mark are read
            if number <= mark:
                return False
            if changes.everything or key in changes.keys:
                return True
        return False

    def _record(self, changes: Changes) -> None:
        self._delivered += 1
        self._recent.append((self._delivered, changes))

    async def wait(self, topic: str, request_id: str, timeout: float) -> None:
        """Until the next change of the pair, or ``timeout`` seconds."""
        event = self.arm(topic, request_id)
        if sniffio.current_async_library() == "trio":
            with trio.move_on_after(timeout):
                await event.wait()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), None if math.isinf(timeout) else timeout)

    def _start(self, loop: object, on_trio: bool) -> None:
        if self._feed is not None:
            self._feed.close()
        self._loop = loop
        self._waiting = {}
        self._record(Changes(everything=True))  # what the earlier feed may have missed
        self._feed = feed = self.store.watch()
        feed.wanted = self._wanted
        if on_trio and feed.pushes:
            assert isinstance(loop, trio.lowlevel.TrioToken)
            feed.on_change = functools.partial(self._push, feed, loop)
            # What the store told the feed before it could push (its first reading says everything) is taken now:
            # a feed left holding it would never push again, since it pushes only when changes come to an empty one.
            self._take(feed)
            trio.lowlevel.spawn_system_task(self._keep, feed, name=f"wake-ups of {self.store.where}")
        elif on_trio:
            trio.lowlevel.spawn_system_task(self._trio_pump, feed, name=f"wake-ups of {self.store.where}")
        else:
            assert isinstance(loop, asyncio.AbstractEventLoop)
            self._asyncio_pump = loop.create_task(self._asyncio_feed(feed), name=f"wake-ups of {self.store.where}")

    def _wanted(self, key: tuple[str, str]) -> bool:
        """Whether a change of ``key`` may matter here (called in the store's threads): a run's log, an inbox or
        work only while someone waits for it (a worker's commits move every log, and a web node that carries no
        run waits for no inbox and no work), and every inbox once a mark was taken (``changed_since``). A waiter
        arms its key before it reads the store, so a change dropped here was committed before that read."""
        return key in self._waiting or (self._marking and key[0] == INBOX)

    def _woken(self, feed: ChangeFeed, changes: Changes) -> bool:
        """Set the events of the pairs that changed; False once ``feed`` is no longer this process's."""
        if feed is not self._feed:
            return False
        self._record(changes)
        woken = list(self._waiting) if changes.everything else changes.keys & self._waiting.keys()
        for key in woken:
            self._waiting.pop(key).set()
        return True

    def _push(self, feed: ChangeFeed, token: trio.lowlevel.TrioToken) -> None:
        """In the store's thread that told ``feed`` of changes: have the loop take them."""
        try:
            token.run_sync_soon(self._take, feed)
        except trio.RunFinishedError:  # the loop ended: nobody waits here any more
            feed.close()

    def _take(self, feed: ChangeFeed) -> None:
        """In the loop: set the events of what ``feed`` was told."""
        changes = feed.take()
        if changes and not self._woken(feed, changes):
            feed.close()

    @staticmethod
    async def _keep(feed: ChangeFeed) -> None:
        """Close ``feed`` when the loop ends (a feed nobody closes keeps the store watching)."""
        try:
            await trio.sleep_forever()
        finally:
            feed.close()

    async def _trio_pump(self, feed: ChangeFeed) -> None:
        thread = trio.CapacityLimiter(1)  # its own: never waits behind store calls for one of trio's threads
        try:
            while not feed.closed:
                changes = await trio.to_thread.run_sync(feed.wait, FEED_SECONDS, abandon_on_cancel=True, limiter=thread)
                if not self._woken(feed, changes):
                    return
        except trio.Cancelled:
            raise
        except Exception:  # the waits fall back on their timeouts
            log.exception("wake-ups of %s stopped", self.store.where)
        finally:
            feed.close()

    async def _asyncio_feed(self, feed: ChangeFeed) -> None:
        loop = asyncio.get_running_loop()
        thread = ThreadPoolExecutor(1, thread_name_prefix="orchestrator-wakeups")  # not the executor store calls use
        try:
            while not feed.closed:
                changes = await loop.run_in_executor(thread, feed.wait, FEED_SECONDS)
                if not self._woken(feed, changes):
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # the waits fall back on their timeouts
            log.exception("wake-ups of %s stopped", self.store.where)
        finally:
            feed.close()
            thread.shutdown(wait=False)  # its read ends within FEED_SECONDS

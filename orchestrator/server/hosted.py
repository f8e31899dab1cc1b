"""``HostBackend``: the routes served on an asyncio loop, from an agent running in an ``AgentHost``'s trio thread.

Every call crosses into the host's thread and runs there on the same
``LocalBackend`` a trio server uses, so the routes cannot tell the two hosts
apart. Reading a run's state and opening its event stream run as plain
functions in that thread (``AgentHost.call_now``: no task each), the stream's
reader started by the same crossing. Its batches are encoded in the host's
thread and handed over a few ahead of the response (``AgentHost.open_batches``);
a reader that leaves (or is cut off) stops reading and nothing else: the run goes on.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Any

from machines.build import Step
from orchestrator import wire
from orchestrator.config import ExternalEvent
from orchestrator.delivery import Delivery
from orchestrator.events import AgentEvent
from orchestrator.host import AgentHost, HostBatches
from orchestrator.observe.trace import NestedTrace
from orchestrator.server.backend import DEFAULT_RETAINED_RUNS, LocalBackend, RunStart, RunView
from orchestrator.store.retention import PruneReport, Retention


class HostBackend:
    """The ``Backend`` of an agent in an ``AgentHost``, for routes served on an asyncio (or any anyio) loop."""

    def __init__(self, host: AgentHost, *, retained_runs: int = DEFAULT_RETAINED_RUNS) -> None:
        self.host = host
        self.local = LocalBackend(host.client, retained_runs=retained_runs)

    def closing(self) -> str | None:
        """Why open event streams must end now (the host is closing or closed), else None."""
        return host_closing(self.host)

    async def start(self, start: RunStart) -> str:
        return await self.host.call(self.local.start, start)

    async def owners(self, session_ids: list[str]) -> dict[str, str]:
        return await self.host.call(self.local.owners, session_ids)

    async def run(self, request_id: str) -> RunView:
        return await self.host.call_now(self.local.view, request_id)

    async def events(self, request_id: str, after: int) -> AsyncIterator[list[dict[str, Any]]]:
        loop = asyncio.get_running_loop()  # UnknownRun, EventsExpired: raised here
        return await self.host.call_now(self._open_events, request_id, after, loop, abandon=HostBatches.stop)

    def _open_events(
        self, request_id: str, after: int, loop: asyncio.AbstractEventLoop
    ) -> HostBatches[dict[str, Any]]:
        """In the host's thread: the run's reader, started at once (one crossing opens the stream)."""
        follower = self.local.client.attach(request_id).events(after)
        return self.host.open_batches(follower, _encoded_batch, loop)

    async def follow(self, request_id: str, after: int) -> tuple[bool, AsyncIterator[list[dict[str, Any]]]]:
        loop = asyncio.get_running_loop()
        return await self.host.call_now(self._follow, request_id, after, loop, abandon=_stop_following)

    def _follow(
        self, request_id: str, after: int, loop: asyncio.AbstractEventLoop
    ) -> tuple[bool, HostBatches[dict[str, Any]]]:
        """In the host's thread: whether the run had ended, and its reader (``_open_events``)."""
        ended = self.local.view(request_id).done
        return ended, self._open_events(request_id, after, loop)

    async def deliver(
        self, session_id: str, request_id: str | None, event: ExternalEvent, idempotency_key: str | None
    ) -> Delivery:
        return await self.host.call(self.local.deliver, session_id, request_id, event, idempotency_key)

    async def pending(self, session_id: str | None) -> list[dict[str, Any]]:
        return await self.host.call(self.local.pending, session_id)

    async def cancel(self, request_id: str) -> tuple[RunView, bool]:
        return await self.host.call(self.local.cancel, request_id)

    async def sessions(self) -> list[dict[str, Any]]:
        return await self.host.call(self.local.sessions)

    async def session(self, session_id: str) -> dict[str, Any] | None:
        return await self.host.call(self.local.session, session_id)

    async def delete_session(self, session_id: str, cancel: bool) -> bool:
        return await self.host.call(self.local.delete_session, session_id, cancel)

    async def prune(self, retention: Retention, now: float | None = None) -> PruneReport:
        return await self.host.call(self.local.prune, retention, now)

    async def fork(
        self, session_id: str, target: str | None, turns: int | None, *, owner: str | None = None
    ) -> tuple[str, int]:
        return await self.host.call(functools.partial(self.local.fork, owner=owner), session_id, target, turns)

    async def set_title(self, session_id: str, title: str) -> bool:
        return await self.host.call(self.local.set_title, session_id, title)

    async def transitions(self, request_id: str) -> list[Step]:
        return await self.host.call(self.local.transitions, request_id)

    async def requests(self, session_id: str) -> list[str]:
        return await self.host.call(self.local.requests, session_id)

    async def child_traces(self, request_id: str) -> list[NestedTrace]:
        return await self.host.call(self.local.child_traces, request_id)

    def running(self) -> int | None:
        return len(self.local.agent.running()) if self.host.state == "serving" else 0


def host_closing(host: AgentHost) -> str | None:
    """Why streams of ``host``'s runs must end now (it is closing or closed), else None."""
    return None if host.state == "serving" else f"the agent host is {host.state}"


def _stop_following(opened: tuple[bool, HostBatches[dict[str, Any]]]) -> None:
    """Stop the reader of a stream whose caller left before it got it."""
    opened[1].stop()


def _encoded_batch(batch: list[AgentEvent]) -> list[dict[str, Any]]:
    """A batch of events as wire JSON (in the host's thread)."""
    return [wire.encode_event(event) for event in batch]

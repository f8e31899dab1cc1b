"""A server's drain: once begun, a request that would start a run is refused with 503 and ``Retry-After``.

Answers, cancels and reads go on, so that the runs in progress can finish (a run waiting for an
answer can still get it). ``serve`` begins one at SIGTERM; ``busy_runs`` says what it waits for.
"""

from __future__ import annotations

import re

import anyio
import attrs
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.server.errors import send_refusal

DEFAULT_GRACE_SECONDS = 30.0
"""How long a drain waits for the runs of this process that work before the server stops."""
DRAIN_RETRY_AFTER = 5
"""Seconds a refused client is told to wait before it tries again (another node, once a balancer moved it)."""
_STARTS_A_RUN = re.compile(r"/sessions/[^/]+/runs/?$")


@attrs.define
class Drain:
    """Whether the server drains, and why (the text of its 503 answers)."""

    reason: str | None = None

    @property
    def draining(self) -> bool:
        return self.reason is not None

    def begin(self, reason: str = "the server is shutting down") -> None:
        self.reason = reason


class DrainGuard:
    """Refuses ``POST /sessions/{id}/runs`` with 503 ``Draining`` and ``Retry-After`` while ``drain`` drains."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reason = self.drain.reason
        if (
            reason is not None
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and _STARTS_A_RUN.search(scope["path"])
        ):
            retry = str(DRAIN_RETRY_AFTER).encode()
            message = f"{reason}: it starts no new run; try again (another server may take it)"
            await send_refusal(send, 503, "Draining", message, [(b"retry-after", retry)])
            return
        await self.app(scope, receive, send)


def busy_runs(backend: object) -> list[str]:
    """Sessions whose run in this process works (not only waits for an answer): what a drain waits for.

    A web node's backend carries no run (its workers do), so it has none.
    """
    from orchestrator.server.backend import LocalBackend

    return backend.agent.working() if isinstance(backend, LocalBackend) else []


async def drained(backend: object, drain: Drain, grace_seconds: float) -> None:
    """Begin ``drain`` and wait up to ``grace_seconds`` for the runs of this process that work (an ASGI
    lifespan's shutdown). An ``AgentHost``'s runs are asked about in its thread; a closed host has none."""
    from orchestrator.host import HostClosed
    from orchestrator.server.hosted import HostBackend

    drain.begin()

    async def busy() -> bool:
        if isinstance(backend, HostBackend):
            try:
                return bool(await backend.host.call(_working, backend))
            except HostClosed:
                return False
        return bool(busy_runs(backend))

    with anyio.move_on_after(grace_seconds):
        while await busy():
            await anyio.sleep(0.05)


async def _working(backend: object) -> list[str]:
    return busy_runs(getattr(backend, "local", backend))

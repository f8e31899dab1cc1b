"""A web node as an ASGI application for any server: ``uvicorn --workers N``, hypercorn, or a mount.

``web_node(url)`` serves the runs of the run store ``url`` exactly as ``serve --db URL`` does,
under asyncio (uvicorn, hypercorn's asyncio worker) as under trio. It talks only to the store,
so any number of processes serve the same runs. ``web_node(url, app="M:A")`` also carries them
with that agent, in each process that serves it (a ``RunCarrier`` beside the server, started by the
app's lifespan, or by its first request when the server runs no lifespan, and drained at its
shutdown, or at the process's SIGTERM without a lifespan), as ``serve --db URL --app M:A`` does;
``python -m orchestrator worker`` is then optional.
With no argument it reads the environment, which is what a server that imports the application
in each of its worker processes needs::

    ORCHESTRATOR_DB=postgresql://app@db/agents ORCHESTRATOR_TOKEN=... ORCHESTRATOR_APP=myapp.agents:agent \\
        uvicorn --factory orchestrator.cluster.asgi:web_node --workers 4 --port 8000
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.cluster.carrier import DEFAULT_SETTINGS, CarrierFailed, CarrierSettings, RunCarrier
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.errors import AgentError
from orchestrator.server.errors import send_refusal
from orchestrator.store.runs_sql import open_run_store

DB_VARIABLE = "ORCHESTRATOR_DB"
TOKEN_VARIABLE = "ORCHESTRATOR_TOKEN"
NO_TOKEN_VARIABLE = "ORCHESTRATOR_NO_TOKEN"
HOSTS_VARIABLE = "ORCHESTRATOR_ALLOWED_HOSTS"
ORIGINS_VARIABLE = "ORCHESTRATOR_ALLOWED_ORIGINS"
APP_VARIABLE = "ORCHESTRATOR_APP"


class WebNodeSettingsMissing(AgentError):
    """``web_node()`` was called without a store URL or token, and the environment gives none."""


def web_node(
    url: str | None = None,
    *,
    token: str | None = None,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] | None = None,
    app: str | None = None,
    carrying: CarrierSettings = DEFAULT_SETTINGS,
    **create_app_options: Any,
) -> ASGIApp:
    """The web node's ASGI app over the run store ``url`` (``postgresql://...`` or ``sqlite:///PATH``).

    Arguments left out come from the environment: ``ORCHESTRATOR_DB``, ``ORCHESTRATOR_TOKEN``
    (or ``ORCHESTRATOR_NO_TOKEN=1`` to serve without one), comma-separated
    ``ORCHESTRATOR_ALLOWED_HOSTS`` and ``ORCHESTRATOR_ALLOWED_ORIGINS``, and ``ORCHESTRATOR_APP``.
    With ``app`` (``MODULE:ATTR`` naming the agent, as ``worker --app``) each process serving the app also
    carries the store's runs (``CarryingRuns``; ``carrying`` sets its worker); an empty ``app`` carries none
    whatever the environment says. Other keyword arguments go to ``create_app``. WebNodeSettingsMissing when
    neither gives a URL or a token; AppSpecError for an ``app`` that is not ``MODULE:ATTR``; the store's own
    errors (unreachable, a schema it cannot read) as ``open_run_store`` raises them.
    """
    from orchestrator.server.app import create_app

    url = url or os.environ.get(DB_VARIABLE) or None
    if url is None:
        raise WebNodeSettingsMissing(f"no run store: pass its URL or set {DB_VARIABLE} (postgresql://... or sqlite:///PATH)")
    if token is None and os.environ.get(NO_TOKEN_VARIABLE, "") not in ("1", "true", "yes"):
        token = os.environ.get(TOKEN_VARIABLE) or None
        if token is None:
            raise WebNodeSettingsMissing(
                f"no token: pass one or set {TOKEN_VARIABLE} (or {NO_TOKEN_VARIABLE}=1 to serve without one)"
            )
    if allowed_hosts is None and os.environ.get(HOSTS_VARIABLE):
        allowed_hosts = _listed(os.environ[HOSTS_VARIABLE])
    if allowed_origins is None:
        allowed_origins = _listed(os.environ.get(ORIGINS_VARIABLE, ""))
    if app is None:
        app = os.environ.get(APP_VARIABLE) or None
    served = create_app(
        StoreBackend(open_run_store(url)),
        token=token,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        **create_app_options,
    )
    if not app:
        return served
    from orchestrator.cli.apploader import AppSpecError

    module, sep, attribute = app.partition(":")
    if not (module and sep and attribute):
        raise AppSpecError(f"the app must be MODULE:ATTR, got {app!r}")
    return CarryingRuns(served, RunCarrier(url, app, carrying))


class CarryingRuns:
    """An ASGI app whose process also carries runs with ``carrier``: started at the lifespan's startup (a carrier
    that cannot start fails the startup, saying why) and drained before the app's own shutdown; without a
    lifespan, started by the first request (which answers 500 CarrierFailed when it cannot start) and drained at
    the process's SIGTERM before the server's own handler gets it (``RunCarrier.drain_at_signals``), or when the
    interpreter exits on its own."""

    def __init__(self, app: ASGIApp, carrier: RunCarrier) -> None:
        self.app = app
        self.carrier = carrier
        self._starting = anyio.Lock()
        self._started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if not self._started:
            try:
                async with self._starting:
                    if not self._started:
                        await anyio.to_thread.run_sync(self.carrier.start)
                        # No lifespan shutdown will come: the process's SIGTERM drains the carrier first.
                        self.carrier.drain_at_signals()
                        self._started = True
            except CarrierFailed as failed:
                if scope["type"] == "http":
                    await send_refusal(send, 500, "CarrierFailed", str(failed))
                    return
                raise
        await self.app(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        startup = await receive()
        try:
            await anyio.to_thread.run_sync(self.carrier.start)
        except CarrierFailed as failed:
            await send({"type": "lifespan.startup.failed", "message": str(failed)})
            return
        self._started = True
        first: list[Message] = [startup]

        async def receiving() -> Message:
            if first:
                return first.pop()
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.carrier.stop)
            return message

        await self.app(scope, receiving, send)


def _listed(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]

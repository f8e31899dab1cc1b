"""A web node as an ASGI application for any server: ``uvicorn --workers N``, hypercorn, or a mount.

``web_node(url)`` serves the runs of the run store ``url`` exactly as ``serve --db URL`` does,
under asyncio (uvicorn, hypercorn's asyncio worker) as under trio. It talks only to the store,
so any number of processes serve the same runs; ``python -m orchestrator worker`` carries them.
With no argument it reads the environment, which is what a server that imports the application
in each of its worker processes needs::

    ORCHESTRATOR_DB=postgresql://app@db/agents ORCHESTRATOR_TOKEN=... \\
        uvicorn --factory orchestrator.cluster.asgi:web_node --workers 4 --port 8000
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp

from orchestrator.cluster.webnode import StoreBackend
from orchestrator.errors import AgentError
from orchestrator.store.runs_sql import open_run_store

DB_VARIABLE = "ORCHESTRATOR_DB"
TOKEN_VARIABLE = "ORCHESTRATOR_TOKEN"
NO_TOKEN_VARIABLE = "ORCHESTRATOR_NO_TOKEN"
HOSTS_VARIABLE = "ORCHESTRATOR_ALLOWED_HOSTS"
ORIGINS_VARIABLE = "ORCHESTRATOR_ALLOWED_ORIGINS"


class WebNodeSettingsMissing(AgentError):
    """``web_node()`` was called without a store URL or token, and the environment gives none."""


def web_node(
    url: str | None = None,
    *,
    token: str | None = None,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] | None = None,
    **create_app_options: Any,
) -> ASGIApp:
    """The web node's ASGI app over the run store ``url`` (``postgresql://...`` or ``sqlite:///PATH``).

    Arguments left out come from the environment: ``ORCHESTRATOR_DB``, ``ORCHESTRATOR_TOKEN``
    (or ``ORCHESTRATOR_NO_TOKEN=1`` to serve without one), and comma-separated
    ``ORCHESTRATOR_ALLOWED_HOSTS`` and ``ORCHESTRATOR_ALLOWED_ORIGINS``. Other keyword arguments go to
    ``create_app``. WebNodeSettingsMissing when neither gives a URL or a token; the store's own errors
    (unreachable, a schema it cannot read) as ``open_run_store`` raises them.
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
    return create_app(
        StoreBackend(open_run_store(url)),
        token=token,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        **create_app_options,
    )


def _listed(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]

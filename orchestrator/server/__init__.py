"""An HTTP service for an agent: runs over Server-Sent Events, answers and steering by POST.

``create_app(agent)`` gives an ASGI application (Starlette) to serve with
hypercorn's trio worker or to mount in one's own trio service;
``python -m orchestrator serve`` runs it. The routes are listed in
``orchestrator.server.openapi`` and served as ``/openapi.json``; the console
at ``/`` is static files of this package.
"""

from __future__ import annotations

from orchestrator.server.app import ServerSettings, create_app

__all__ = ["ServerSettings", "create_app"]

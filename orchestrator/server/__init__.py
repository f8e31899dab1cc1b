"""An HTTP service for an agent: runs over Server-Sent Events, answers and steering by POST.

``create_app(agent)`` gives an ASGI application (Starlette) to serve with
hypercorn's trio worker or to mount in one's own trio service; given an
``AgentHost``, under any ASGI server (uvicorn) or mounted in FastAPI
(see docs/asyncio.md, as for ``sse_response``);
``python -m orchestrator serve`` runs it. The routes are listed in
``orchestrator.server.openapi`` and served as ``/openapi.json``; the console
at ``/`` is static files of this package.
"""

from __future__ import annotations

from orchestrator.server.app import ServerSettings, create_app
from orchestrator.server.streams import CLOSING_EVENT, sse_response

__all__ = ["CLOSING_EVENT", "ServerSettings", "create_app", "sse_response"]

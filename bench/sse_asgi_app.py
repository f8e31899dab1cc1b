"""The shaped agent (``bench.sse_app``) in an AgentHost, its app for ``uvicorn bench.sse_asgi_app:app``."""

from __future__ import annotations

from bench.sse_app import agent
from orchestrator.host import AgentHost
from orchestrator.server import create_app

host = AgentHost(agent)
app = create_app(host)

"""The routes of the standard protocols, mounted beside the service's own by ``create_app``."""

from __future__ import annotations

import functools
from typing import Any

from starlette.routing import BaseRoute, Route

from orchestrator.server.protocols import agui
from orchestrator.server.routes import Service


def protocol_routes(service: Service) -> list[BaseRoute]:
    """``POST /ag-ui`` and ``POST /ai-sdk/chat``, over the service's backend, its token, body cap and guards."""
    return [
        Route("/ag-ui", functools.partial(agui.agui_route, service.backend, service.max_body_bytes), methods=["POST"]),
    ]


def protocol_paths(common: dict[str, Any], posted: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI paths of the protocol routes; ``common`` and ``posted`` are the service's shared refusals."""
    stream = {"description": "an SSE stream of the protocol's events", "content": {"text/event-stream": {"schema": {}}}}
    run_agent_input = {
        "type": "object",
        "required": ["threadId", "runId", "messages"],
        "properties": {
            "threadId": {"type": "string", "description": "the session"},
            "runId": {"type": "string", "description": "the request id of a run that starts a request"},
            "parentRunId": {"type": "string", "description": "the active request's id: this run steers it"},
            "messages": {"type": "array", "items": {"type": "object"}},
            "resume": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["interruptId", "status"],
                    "properties": {
                        "interruptId": {"type": "string"},
                        "status": {"enum": ["resolved", "cancelled"]},
                        "payload": {},
                    },
                },
            },
        },
    }
    return {
        "/ag-ui": {
            "post": {
                "summary": "AG-UI 1.0: a RunAgentInput in, AG-UI events out (see docs/protocols.md)",
                "requestBody": {"required": True, "content": {"application/json": {"schema": run_agent_input}}},
                "responses": {"200": stream, **posted, **common},
            }
        },
    }

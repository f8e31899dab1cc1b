"""The routes of the standard protocols, mounted beside the service's own by ``create_app``."""

from __future__ import annotations

import functools
from typing import Any

from starlette.routing import BaseRoute, Route

from orchestrator.server.backend import Backend
from orchestrator.server.protocols import agui, ai_sdk


def protocol_routes(backend: Backend, max_body_bytes: int) -> list[BaseRoute]:
    """``POST /ag-ui`` and ``POST /ai-sdk/chat`` over ``backend``, behind the app's token and guards."""
    return [
        Route("/ag-ui", functools.partial(agui.agui_route, backend, max_body_bytes), methods=["POST"]),
        Route(
            "/ai-sdk/chat",
            functools.partial(ai_sdk.chat_route, backend, max_body_bytes),
            methods=["POST"],
        ),
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
    chat = {
        "type": "object",
        "required": ["id", "messages"],
        "properties": {
            "id": {"type": "string", "description": "the chat: the session"},
            "messages": {"type": "array", "minItems": 1, "items": {"type": "object"}},
            "trigger": {"type": "string"},
        },
    }
    chat_stream = {
        "description": "the AI SDK UI message stream (header x-vercel-ai-ui-message-stream: v1), ending with [DONE]",
        "content": {"text/event-stream": {"schema": {}}},
    }
    return {
        "/ai-sdk/chat": {
            "post": {
                "summary": "the AI SDK UI message stream: useChat's body in (see docs/protocols.md)",
                "requestBody": {"required": True, "content": {"application/json": {"schema": chat}}},
                "responses": {
                    "200": chat_stream,
                    "404": {**posted["400"], "description": "an answer for no waiting call of this chat"},
                    "409": {**posted["400"], "description": "the chat's request runs or waits: SessionBusy"},
                    **posted,
                    "422": {**posted["400"], "description": "an answer the waiting call refuses (AnswerRefused)"},
                    **common,
                },
            }
        },
        "/ag-ui": {
            "post": {
                "summary": "AG-UI 1.0: a RunAgentInput in, AG-UI events out (see docs/protocols.md)",
                "requestBody": {"required": True, "content": {"application/json": {"schema": run_agent_input}}},
                "responses": {"200": stream, **posted, **common},
            }
        },
    }

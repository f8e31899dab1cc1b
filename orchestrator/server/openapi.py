"""The OpenAPI 3.1 document of the service, served at ``/openapi.json``.

Written from the same facts the routes enforce (body fields, limits, status
codes); a test walks it with schemathesis against the running service.
"""

from __future__ import annotations

import functools
from typing import Any

from orchestrator.server.bodies import DEFAULT_MAX_BODY_BYTES, MAX_TURN
from orchestrator.server.protocols.a2a_wire import openapi_paths as a2a_openapi_paths

_ID = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]*$"}
_ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
_PENDING = {
    "type": "object",
    "required": ["session_id", "request_id", "tool_call_id", "event", "payload", "response_event"],
    "properties": {
        "session_id": {"type": "string"},
        "request_id": {"type": "string"},
        "tool_call_id": {"type": "string"},
        "event": {"type": "string"},
        "payload": {"type": "object"},
        "response_event": {"type": "string"},
        "live": {"type": "boolean"},
    },
}
_STATES = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}
_CONTENT_PART = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string", "enum": ["text", "image"]}},
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _refusal(description: str) -> dict[str, Any]:
    return _json(_ERROR, description)


_PRUNED = _refusal("the run was pruned (RunPruned): it existed, its events and state are gone")


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": _ID}


_COMMON = {
    "401": _refusal("missing or wrong bearer token, or no principal from the app's authenticate (when it has either)"),
    "403": _refusal("a Host the server does not answer to, or a change asked by a page of another origin"),
    "503": _refusal("a cluster's web node cannot reach its run store; retry (Retry-After)"),
}
_POSTED = {
    "400": _refusal("malformed body or parameter"),
    "413": _refusal(f"body over the limit ({DEFAULT_MAX_BODY_BYTES} bytes by default)"),
    "415": _refusal("the body is not sent as Content-Type: application/json"),
    "422": _refusal("Idempotency-Key reused with a different body"),
}
_IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "a retried POST with the same key and body gets the first answer again",
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
}


def _operation(summary: str, responses: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**responses, **_COMMON}, **more}


_COUNT = {"type": ["integer", "null"], "minimum": 0}
_LIMITS = {
    "type": ["object", "null"],
    "description": "the run's UsageLimits (docs/limits.md)",
    "additionalProperties": False,
    "properties": {
        **{name: _COUNT for name in ("requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls")},
        "per_tool": {
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": {"type": "integer", "minimum": 0},
        },
        "on_exhausted": {"enum": ["fail", "wrap_up"]},
        "count_subagents": {"type": "boolean"},
    },
}


@functools.cache
def _document() -> dict[str, Any]:
    run_body = {
        "type": "object",
        "required": ["input"],
        "additionalProperties": False,
        "properties": {
            "input": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "minItems": 1, "items": _CONTENT_PART},
                ]
            },
            "request_id": _ID,
            "limits": _LIMITS,
            "deadline": {"type": ["number", "null"], "exclusiveMinimum": 0, "description": "seconds the run may run"},
        },
    }
    event_body = {
        "type": "object",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {"name": {"type": "string", "minLength": 1}, "payload": {"type": "object"}, "request_id": _ID},
    }
    fork_body = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"turn": {"type": "integer", "minimum": 1, "maximum": MAX_TURN}, "session_id": _ID},
    }
    title_body = {"type": "object", "required": ["title"], "additionalProperties": False, "properties": {"title": _ID}}
    session = {
        "type": "object",
        "properties": {
            "session_id": {"type": "string"},
            "title": {"type": ["string", "null"]},
            "request_id": {"type": ["string", "null"]},
            "state": {"type": ["string", "null"]},
            "states": _STATES,
            "pending": {"type": "array", "items": _PENDING},
        },
    }
    run = {
        "type": "object",
        "properties": {
            "request_id": {"type": "string"},
            "session_id": {"type": "string"},
            "state": {"type": ["string", "null"]},
            "states": _STATES,
            "done": {"type": "boolean"},
        },
    }
    text = {"description": "text", "content": {"text/plain": {"schema": {"type": "string"}}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "orchestrator",
            "version": "1",
            "description": "Agent requests as state machines: runs, their events over SSE, answers and steering.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
        "paths": {
            "/health": {
                "get": {
                    "summary": "liveness (never needs the token)",
                    "security": [],
                    "responses": {"200": _json({"type": "object"}, "the server runs")},
                }
            },
            "/sessions": {
                "get": _operation(
                    "stored and running sessions, with state and pending approvals",
                    {
                        "200": _json(
                            {"type": "object", "properties": {"sessions": {"type": "array", "items": session}}},
                            "sessions",
                        )
                    },
                )
            },
            "/sessions/{session_id}": {
                "get": _operation(
                    "a session: history in the wire format, states of every region, Plan Mode, pending approvals",
                    {
                        "200": _json({"type": "object"}, "the session"),
                        "400": _refusal("bad session id"),
                        "404": _refusal("no such session"),
                    },
                    parameters=[_path("session_id")],
                ),
                "delete": _operation(
                    "remove the session from every store: history, waits and answers, runs, event logs, inbox",
                    {
                        "200": _json(
                            {"type": "object", "required": ["deleted"], "properties": {"deleted": {"type": "string"}}},
                            "the session is gone",
                        ),
                        "400": _refusal("bad session id, or cancel not true or false"),
                        "404": _refusal("no such session"),
                        "409": _refusal("a run of the session is running (?cancel=true cancels it first)"),
                    },
                    parameters=[
                        _path("session_id"),
                        {"name": "cancel", "in": "query", "required": False, "schema": {"type": "boolean"}},
                    ],
                ),
            },
            "/sessions/{session_id}/export": {
                "get": _operation(
                    "the session as a Markdown document or a self-contained HTML page (no scripts)",
                    {
                        "200": {
                            "description": "the session",
                            "content": {
                                "text/markdown": {"schema": {"type": "string"}},
                                "text/html": {"schema": {"type": "string"}},
                            },
                        },
                        "400": _refusal("bad session id or format"),
                        "404": _refusal("no such session"),
                    },
                    parameters=[
                        _path("session_id"),
                        {
                            "name": "format",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": ["markdown", "html"], "default": "markdown"},
                        },
                    ],
                )
            },
            "/sessions/{session_id}/fork": {
                "post": _operation(
                    "a new session holding this one's messages, all or up to the end of turn `turn`",
                    {
                        "201": _json(
                            {
                                "type": "object",
                                "required": ["session_id", "forked_from", "messages"],
                                "properties": {
                                    "session_id": {"type": "string"},
                                    "forked_from": {"type": "string"},
                                    "messages": {"type": "integer", "minimum": 0},
                                },
                            },
                            "the new session",
                        ),
                        "404": _refusal("no such session"),
                        "409": _refusal("the session is running, or the new session id is taken"),
                        "501": _refusal("this agent keeps its sessions where they cannot be listed, so none forked"),
                        **_POSTED,
                    },
                    parameters=[_path("session_id"), _IDEMPOTENCY],
                    requestBody={"required": True, "content": {"application/json": {"schema": fork_body}}},
                )
            },
            "/sessions/{session_id}/title": {
                "put": _operation(
                    "set the session's title (otherwise its first input, shortened)",
                    {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["session_id", "title"],
                                "properties": {"session_id": {"type": "string"}, "title": {"type": "string"}},
                            },
                            "the title set",
                        ),
                        "404": _refusal("no such session"),
                        **{code: refusal for code, refusal in _POSTED.items() if code != "422"},
                    },
                    parameters=[_path("session_id")],
                    requestBody={"required": True, "content": {"application/json": {"schema": title_body}}},
                )
            },
            "/sessions/{session_id}/runs": {
                "post": _operation(
                    "start a run (one request) of the session",
                    {
                        "202": _json(
                            {
                                "type": "object",
                                "required": ["request_id", "session_id"],
                                "properties": {
                                    "request_id": {"type": "string"},
                                    "session_id": {"type": "string"},
                                    "events": {"type": "string"},
                                },
                            },
                            "the run started",
                        ),
                        "409": _refusal("the session is busy, or the request id is taken"),
                        "503": _refusal("the server is draining (shutting down): try again after Retry-After"),
                        **_POSTED,
                    },
                    parameters=[_path("session_id"), _IDEMPOTENCY],
                    requestBody={"required": True, "content": {"application/json": {"schema": run_body}}},
                )
            },
            "/sessions/{session_id}/events": {
                "post": _operation(
                    "deliver an external event: an approval, an ask_user answer, steering",
                    {
                        "202": _json(
                            {
                                "type": "object",
                                "properties": {"accepted": {"type": "array", "items": {"type": "string"}}},
                            },
                            "accepted by the named extensions",
                        ),
                        "409": _json(
                            {**_ERROR, "properties": {**_ERROR["properties"], "refused": {"type": "object"}}},
                            "refused; `refused` gives each extension's reason",
                        ),
                        **_POSTED,
                    },
                    parameters=[_path("session_id"), _IDEMPOTENCY],
                    requestBody={"required": True, "content": {"application/json": {"schema": event_body}}},
                )
            },
            "/runs/{request_id}": {
                "get": _operation(
                    "a run's state",
                    {
                        "200": _json(run, "the run"),
                        "400": _refusal("bad id"),
                        "404": _refusal("no such run"),
                        "410": _PRUNED,
                    },
                    parameters=[_path("request_id")],
                )
            },
            "/runs/{request_id}/events": {
                "get": _operation(
                    "the run's events as Server-Sent Events (id: seq, event: type, data: wire JSON), "
                    "replayed after Last-Event-ID, then live; ends with the terminal event, or with an "
                    "`event: error` frame ({type: error, error: {type, message}}) when the reader fell "
                    "behind the retained events, or with an `event: closing` frame ({type: closing, reason}) "
                    "when the server shuts down (reconnect with Last-Event-ID)",
                    {
                        "200": {
                            "description": "event stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        "204": {"description": "the run has ended, nothing after Last-Event-ID: stop reconnecting"},
                        "400": _refusal("bad Last-Event-ID (ASCII digits only) or bad id"),
                        "404": _refusal("no such run"),
                        "410": _refusal(
                            "the events after Last-Event-ID are no longer retained (EventsExpired), or the run was"
                            " pruned (RunPruned)"
                        ),
                    },
                    parameters=[
                        _path("request_id"),
                        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
                        {"name": "after", "in": "query", "required": False, "schema": {"type": "string"}},
                    ],
                )
            },
            "/runs/{request_id}/cancel": {
                "post": _operation(
                    "cancel a run",
                    {
                        "202": _json(run, "cancellation requested"),
                        "400": _refusal("bad id"),
                        "404": _refusal("no such run"),
                        "410": _PRUNED,
                    },
                    parameters=[_path("request_id")],
                )
            },
            "/runs/{request_id}/trace": {
                "get": _operation(
                    "the run's path through the request machine as a Mermaid flowchart, taken edges highlighted",
                    {"200": text, "400": _refusal("bad id"), "404": _refusal("no such run"), "410": _PRUNED},
                    parameters=[_path("request_id")],
                )
            },
            "/machines/{name}": {
                "get": _operation(
                    "a machine's generated diagram: NAME.mmd (Mermaid), NAME.svg (needs Graphviz), NAME.json",
                    {"200": text, "404": _refusal("no such machine or form")},
                    parameters=[{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                )
            },
            **a2a_openapi_paths(),
        },
    }


def openapi_document() -> dict[str, Any]:
    from orchestrator.server.protocols.routes import protocol_paths

    document = _document()
    return {**document, "paths": {**document["paths"], **protocol_paths(_COMMON, _POSTED)}}

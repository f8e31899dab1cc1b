"""JSON error bodies: every refusal says what was wrong, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse
from starlette.types import Send

if TYPE_CHECKING:
    from orchestrator.runtime.handle import RunPruned


class HTTPRefusal(Exception):
    """A request refused with ``status`` and a reason the client can act on."""

    def __init__(self, status: int, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.extra = extra

    def response(self, headers: Mapping[str, str] | None = None) -> JSONResponse:
        body: dict[str, Any] = {"error": {"type": self.kind, "message": self.message}, **self.extra}
        return JSONResponse(body, status_code=self.status, headers=dict(headers or {}))


def bad_request(message: str) -> HTTPRefusal:
    return HTTPRefusal(400, "BadRequest", message)


def not_found(message: str) -> HTTPRefusal:
    return HTTPRefusal(404, "NotFound", message)


def run_gone(pruned: RunPruned) -> HTTPRefusal:
    """410 ``RunPruned``: the run existed and was pruned (an unknown run is a 404)."""
    return HTTPRefusal(410, "RunPruned", str(pruned))


async def send_refusal(
    send: Send, status: int, kind: str, message: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer an ASGI request with the JSON refusal ``{"error": {"type": kind, "message": message}}``."""
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    start_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": body})

"""JSON error bodies: every refusal says what was wrong, never a traceback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse


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

"""ASGI middleware: which web origins may change state, and the CORS answers for the allowed ones.

A state-changing request (POST, PUT, PATCH, DELETE) whose ``Origin`` is
neither the server's own (the one ``Host`` names) nor an allowed origin is
refused with a 403 ``OriginNotAllowed``: a page elsewhere cannot start or
answer runs. An allowed origin gets CORS answers: its preflight (``OPTIONS``
with ``Access-Control-Request-Method``) is answered 204 without a token, and
every response to it carries ``Access-Control-Allow-Origin`` with its origin.
Requests without ``Origin`` (non-browser clients) pass unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.server.errors import send_refusal
from orchestrator.server.hosts import header, split_host

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = {"http": 80, "https": 443}
CORS_METHODS = b"GET, POST, PUT, DELETE"
CORS_REQUEST_HEADERS = b"Authorization, Content-Type, Idempotency-Key, Last-Event-ID"
CORS_EXPOSED_HEADERS = b"Idempotent-Replay, Retry-After, WWW-Authenticate"
PREFLIGHT_MAX_AGE = b"600"


def origin_parts(text: str) -> tuple[str, str, int]:
    """An origin ``scheme://host[:port]`` as (scheme, lowercased host, port); ValueError when it is not one."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        raise ValueError(f"{text!r} is not an origin (scheme://host[:port])") from None
    scheme = parts.scheme.lower()
    if (
        scheme not in DEFAULT_PORTS
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise ValueError(f"{text!r} is not an http or https origin (scheme://host[:port])")
    return scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme]


def normalized_origin(text: str) -> str:
    """The origin as a browser serializes it in ``Origin``: lowercase, no default port, no slash."""
    scheme, host, port = origin_parts(text)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port == DEFAULT_PORTS[scheme] else f"{scheme}://{shown}:{port}"


def same_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` names the host and port of the request's ``Host`` (the console's own page)."""
    if host is None:
        return False
    try:
        scheme, origin_host, origin_port = origin_parts(origin)
    except ValueError:
        return False
    found = split_host(host)
    if found is None:
        return False
    name, port = found
    return name == origin_host and (port if port is not None else DEFAULT_PORTS[scheme]) == origin_port


class OriginGuard:
    """Refuses state changes from foreign origins and answers CORS for ``allowed`` origins."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(normalized_origin(origin) for origin in allowed)

    def _listed(self, origin: str) -> bool:
        try:
            return normalized_origin(origin) in self.allowed
        except ValueError:
            return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = header(scope, b"origin") if scope["type"] == "http" else None
        if origin is None:
            await self.app(scope, receive, send)
            return
        listed = self._listed(origin)
        method = scope["method"]
        if method == "OPTIONS" and header(scope, b"access-control-request-method") is not None:
            if listed:
                await self._preflight(send, origin)
            else:
                await send_refusal(send, 403, "OriginNotAllowed", f"origin {origin!r} is not allowed here")
            return
        if method in STATE_CHANGING and not listed and not same_origin(origin, header(scope, b"host")):
            message = f"a {method} from origin {origin!r} is refused: only this server's own and the allowed origins"
            await send_refusal(send, 403, "OriginNotAllowed", message, [(b"vary", b"Origin")])
            return
        await self.app(scope, receive, self._answering(send, origin if listed else None))

    def _answering(self, send: Send, origin: str | None) -> Send:
        """``send`` adding ``Vary: Origin`` (when origins are allowed) and, for an allowed ``origin``, CORS headers."""
        if not self.allowed:
            return send

        extra = _cors_headers(origin) if origin is not None else [(b"vary", b"Origin")]

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = _with_headers(message, extra)
            await send(message)

        return answer

    async def _preflight(self, send: Send, origin: str) -> None:
        headers = [
            *_cors_headers(origin),
            (b"access-control-allow-methods", CORS_METHODS),
            (b"access-control-allow-headers", CORS_REQUEST_HEADERS),
            (b"access-control-max-age", PREFLIGHT_MAX_AGE),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", CORS_EXPOSED_HEADERS),
        (b"vary", b"Origin"),
    ]


def _with_headers(message: Message, extra: list[tuple[bytes, bytes]]) -> MutableMapping[str, Any]:
    return {**message, "headers": [*message.get("headers", ()), *extra]}

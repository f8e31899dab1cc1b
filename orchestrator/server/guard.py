"""ASGI middleware: the optional bearer token, checked before any route runs.

With a token set, every path but ``/health`` needs ``Authorization: Bearer
TOKEN``; a GET may carry it as ``?access_token=TOKEN`` instead, since a
browser cannot add a header to a page load. A missing or wrong token is a
401 with a JSON reason.
"""

from __future__ import annotations

import hmac
import json
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/health"})


class TokenGuard:
    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        problem = self._problem(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": {"type": "Unauthorized", "message": problem}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="orchestrator"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _problem(self, scope: Scope) -> str | None:
        assert self.token is not None
        given: bytes | None = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, credential = value.partition(b" ")
                if scheme.lower() != b"bearer":
                    return "the Authorization header must use the Bearer scheme"
                given = credential.strip()
        if given is None and scope.get("method") == "GET":
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if "access_token" in query:
                given = query["access_token"][0].encode()
        if given is None:
            return "a bearer token is required"
        if not hmac.compare_digest(given, self.token):
            return "the bearer token is wrong"
        return None

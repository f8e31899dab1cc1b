"""ASGI middleware: the optional bearer token, checked before any route runs.

With a token set, every path but the open ones (``/health``, and the
console's page and static files, which hold no data) needs ``Authorization:
Bearer TOKEN``; a GET may carry it as ``?access_token=TOKEN`` instead, since a
browser's EventSource cannot add a header. A missing or wrong token is a 401
with a JSON reason.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.server.errors import send_refusal


def route_path(scope: Scope) -> str:
    """The request's path inside this app: without the ``root_path`` of a mount it is served under."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path


HEALTH_PATH = "/health"
CONSOLE_PATHS = frozenset({"/"})
CONSOLE_PREFIXES = ("/static/",)


class TokenGuard:
    """Refuses (401) a request to a guarded path without the bearer ``token``; no token guards nothing."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        *,
        open_paths: Iterable[str] = (HEALTH_PATH,),
        open_prefixes: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.open_paths = frozenset(open_paths)
        self.open_prefixes = tuple(open_prefixes)

    def _open(self, path: str) -> bool:
        return path in self.open_paths or path.startswith(self.open_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http" or self._open(route_path(scope)):
            await self.app(scope, receive, send)
            return
        problem = self._problem(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        await send_refusal(send, 401, "Unauthorized", problem, [(b"www-authenticate", b'Bearer realm="orchestrator"')])

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

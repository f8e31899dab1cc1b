"""ASGI middleware: only requests naming an allowed host in ``Host`` are served.

A page that rebinds its own DNS name to this machine's address reaches the
server with ``Host: its-name``; refusing names the server does not answer to
keeps such a page from reading anything. An allowed name matches any port;
``name:port`` matches that port only; ``*`` allows every host.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.server.errors import send_refusal

ANY_HOST = "*"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def split_host(text: str) -> tuple[str, int | None] | None:
    """``name``, ``name:port``, ``[v6]`` or ``[v6]:port`` as (lowercased name, port), None when malformed.

    A bare IPv6 literal (``::1``) is read as a name, as a list of allowed hosts writes it.
    """
    text = text.strip().lower()
    port_text = ""
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:]
        if rest and not port_text:
            return None
    elif text.count(":") > 1:
        name = text
    else:
        name, colon, port_text = text.partition(":")
        if colon and not port_text:
            return None
    if not name or any(c.isspace() or c in "/@?#[]" for c in name):
        return None
    if not port_text:
        return name, None
    if not port_text.isdigit() or len(port_text) > 5 or int(port_text) > 65535:
        return None
    return name, int(port_text)


@attrs.frozen
class AllowedHost:
    """A host name (or IP literal) the server answers to, on any port or on ``port`` only."""

    name: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> AllowedHost:
        found = split_host(text)
        if found is None:
            raise ValueError(f"{text!r} is not a host name, NAME:PORT, or [IPv6]:PORT")
        return cls(*found)

    def admits(self, name: str, port: int | None) -> bool:
        return self.name == name and (self.port is None or self.port == port)

    def __str__(self) -> str:
        shown = f"[{self.name}]" if ":" in self.name else self.name
        return shown if self.port is None else f"{shown}:{self.port}"


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of the request header ``name`` (lowercase bytes), decoded as latin-1."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class HostGuard:
    """Refuses (403 ``HostNotAllowed``) an HTTP request whose ``Host`` is none of ``allowed``."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        entries = [entry.strip() for entry in allowed]
        self.any_host = ANY_HOST in entries
        self.allowed = tuple(AllowedHost.parse(entry) for entry in entries if entry != ANY_HOST)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.any_host or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        problem = self._problem(header(scope, b"host"))
        if problem is None:
            await self.app(scope, receive, send)
            return
        await send_refusal(send, 403, "HostNotAllowed", problem)

    def _problem(self, host: str | None) -> str | None:
        if host is None:
            return "a Host header is required"
        found = split_host(host)
        if found is not None and any(allowed.admits(*found) for allowed in self.allowed):
            return None
        names = ", ".join(str(allowed) for allowed in self.allowed) or "none"
        return f"this server does not answer to Host {host!r} (allowed: {names})"

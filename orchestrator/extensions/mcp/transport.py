"""Opening one server's transport, with a read stream that says when the server went away."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import IO, Any

import anyio
import trio
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from orchestrator.extensions.mcp.servers import HttpServer, MCPServer, StdioServer

Streams = tuple[Any, Any]


class WatchedStream:
    """A transport's read stream that sets ``ended`` when the transport stops delivering (EOF or closed)."""

    def __init__(self, inner: Any, ended: trio.Event) -> None:
        self._inner = inner
        self._ended = ended

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise
        return item

    def __aiter__(self) -> WatchedStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> WatchedStream:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def _http(server: HttpServer) -> AsyncIterator[Streams]:
    http = create_mcp_http_client(headers=dict(server.headers))
    async with http, streamable_http_client(server.url, http_client=http) as streams:
        yield streams


def _opened(server: MCPServer, stderr: IO[bytes] | None) -> Any:
    if isinstance(server, StdioServer):
        parameters = StdioServerParameters(
            command=server.command, args=list(server.args), env=dict(server.env or {}), cwd=server.cwd
        )
        return stdio_client(parameters, errlog=stderr)  # type: ignore[arg-type]  # any file with a descriptor
    if isinstance(server, HttpServer):
        return _http(server)
    raise TypeError(f"unsupported MCP server description: {server!r}")


@asynccontextmanager
async def watched_transport(server: MCPServer, ended: trio.Event, stderr: IO[bytes] | None) -> AsyncIterator[Streams]:
    """The server's (read, write) streams; ``ended`` is set once its read stream ends."""
    async with _opened(server, stderr) as (read, write):
        yield WatchedStream(read, ended), write

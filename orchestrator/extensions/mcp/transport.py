"""Opening one server's transport, with a read stream that says when the server went away."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import anyio
import trio
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from orchestrator.extensions.mcp.servers import HttpServer, MCPServer, StdioServer
from orchestrator.extensions.mcp.stdio import Broken, StderrLog, stdio_transport

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


def _opened(server: MCPServer, stderr: StderrLog | None, broken: Broken) -> Any:
    if isinstance(server, StdioServer):
        return stdio_transport(server, stderr or StderrLog(server.max_stderr_bytes), broken)
    if isinstance(server, HttpServer):
        return _http(server)
    raise TypeError(f"unsupported MCP server description: {server!r}")


@asynccontextmanager
async def watched_transport(
    server: MCPServer, ended: trio.Event, stderr: StderrLog | None, broken: Broken
) -> AsyncIterator[Streams]:
    """The server's (read, write) streams; ``ended`` is set once its read stream ends.

    A stdio server's stderr is kept in ``stderr``; ``broken`` is told why when the transport ends the connection.
    """
    async with _opened(server, stderr, broken) as (read, write):
        yield WatchedStream(read, ended), write

"""MCPExtension: the tools of MCP servers, offered in every request of one Agent.

Enter it with ``async with`` around the agent's use: its servers run in its
own nursery and are stopped when the block exits (also on cancellation). A
server starts when the first request needs its tools, and its connection
(``machines.mcp_connection``) lives until then, failed servers being
restarted by the next request that needs them.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING

import trio

from orchestrator.errors import AgentError
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.mcp.connection import MCPConnection
from orchestrator.extensions.mcp.servers import MCPServer

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext


class MCPNotOpen(AgentError):
    """A request needed an MCPExtension that is not open (not yet entered with ``async with``, or closed)."""


class MCPExtension(AgentExtension):
    """Offers the tools of MCP servers (``StdioServer``, ``HttpServer``) in every request.

    Use it as ``async with MCPExtension([...]) as mcp:`` and give ``mcp`` to
    the Agent inside the block. Each server is started once for the
    extension (so once per Agent) by the first request, and stopped when the
    block exits.
    """

    def __init__(self, servers: Iterable[MCPServer]) -> None:
        self.connections: dict[str, MCPConnection] = {}
        for server in servers:
            if not isinstance(server, MCPServer):
                raise TypeError(f"{server!r} is not an MCP server description (StdioServer or HttpServer)")
            if server.name in self.connections:
                raise ValueError(f"two MCP servers are named {server.name!r}")
            self.connections[server.name] = MCPConnection(server)
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        self._closed = False

    def state(self, server: str) -> str:
        """The connection state of ``server``: idle, connecting, ready, failed or closed."""
        return self.connections[server].state

    def stderr(self, server: str) -> str:
        """What the stdio server ``server`` last wrote to stderr: its last ``max_stderr_bytes``, after a line
        saying how many earlier bytes were dropped (if any); "" for an HTTP server or one never started."""
        return self.connections[server].stderr

    async def __aenter__(self) -> MCPExtension:
        if self._nursery_manager is not None or self._closed:
            raise RuntimeError("an MCPExtension is entered once")
        manager = trio.open_nursery()
        self._nursery = await manager.__aenter__()
        self._nursery_manager = manager
        for connection in self.connections.values():
            connection.nursery = self._nursery
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        self._closed = True
        for connection in self.connections.values():
            await connection.close()
        manager, self._nursery_manager, self._nursery = self._nursery_manager, None, None
        assert manager is not None
        await manager.__aexit__(kind, error, trace)
        return None

    async def on_tool(self, context: AgentRunContext) -> None:
        """Start the servers that are not ready (together), then offer the tools of those that are."""
        if self._nursery is None:
            state = "closed" if self._closed else "not open"
            raise MCPNotOpen(f"the MCPExtension is {state}: use it inside `async with MCPExtension(...)`")
        async with trio.open_nursery() as starting:
            for connection in self.connections.values():
                starting.start_soon(connection.ensure, context)
        for connection in self.connections.values():
            for definition in connection.definitions:
                context.register_tool(definition)

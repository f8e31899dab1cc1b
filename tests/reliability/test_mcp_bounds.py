"""A hostile MCP server costs a bounded amount; its descriptions are checked when they are made."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.extensions.mcp import HttpServer, MCPServer, StdioServer

# --- constructor checks ---------------------------------------------------------------------------

STDIO: dict[str, Any] = {"name": "s", "command": "server"}
HTTP: dict[str, Any] = {"name": "h", "url": "https://example.test/mcp"}


@pytest.mark.parametrize(
    ("kind", "fields", "error", "field"),
    [
        (StdioServer, {"command": ["node", "server.js"]}, TypeError, "command"),
        (StdioServer, {"command": None}, TypeError, "command"),
        (StdioServer, {"command": ""}, ValueError, "command"),
        (StdioServer, {"command": "a\0b"}, ValueError, "command"),
        (StdioServer, {"args": "--flag"}, TypeError, "args"),
        (StdioServer, {"args": 3}, TypeError, "args"),
        (StdioServer, {"args": ["ok", 3]}, TypeError, "args"),
        (StdioServer, {"env": ["A=1"]}, TypeError, "env"),
        (StdioServer, {"env": {"A": 1}}, TypeError, "env"),
        (StdioServer, {"env": {"A=B": "1"}}, ValueError, "env"),
        (StdioServer, {"cwd": 3}, TypeError, "cwd"),
        (StdioServer, {"cwd": ""}, ValueError, "cwd"),
        (StdioServer, {"name": 7}, TypeError, "name"),
        (StdioServer, {"name": "has space"}, ValueError, "name"),
        (StdioServer, {"prefix": 1}, TypeError, "prefix"),
        (StdioServer, {"prefix": "a.b/"}, ValueError, "prefix"),
        (StdioServer, {"connect_timeout": "30"}, TypeError, "connect_timeout"),
        (StdioServer, {"call_timeout": 0}, ValueError, "call_timeout"),
        (HttpServer, {"url": b"https://example.test"}, TypeError, "url"),
        (HttpServer, {"url": "ftp://example.test"}, ValueError, "URL"),
        (HttpServer, {"headers": [("A", "b")]}, TypeError, "headers"),
        (HttpServer, {"headers": {"A": "b\r\nInjected: 1"}}, ValueError, "headers"),
        (MCPServer, {"name": None}, TypeError, "name"),
    ],
)
def test_every_mcp_server_value_checks_its_fields_when_made(
    kind: type[MCPServer], fields: dict[str, Any], error: type[Exception], field: str
) -> None:
    base = {StdioServer: STDIO, HttpServer: HTTP, MCPServer: {"name": "m"}}[kind]
    with pytest.raises(error, match=field):
        kind(**{**base, **fields})

"""Tools of Model Context Protocol servers, through the official ``mcp`` SDK (``pip install 'orchestrator[mcp]'``).

``MCPExtension([StdioServer(...), HttpServer(...)])`` offers each server's
tools in every request; see its docstring and docs/extensions/mcp.md.
"""

from orchestrator.extensions.mcp.servers import HttpServer, MCPServer, StdioServer

try:
    from orchestrator.extensions.mcp.extension import MCPExtension, MCPNotOpen
except ModuleNotFoundError as missing:  # pragma: no cover - depends on the installed extras
    if missing.name is None or missing.name.split(".")[0] not in ("mcp", "mcp_types"):
        raise
    raise ModuleNotFoundError(
        "MCPExtension needs the mcp package: pip install 'orchestrator[mcp]'", name=missing.name
    ) from missing

__all__ = ["HttpServer", "MCPExtension", "MCPNotOpen", "MCPServer", "StdioServer"]

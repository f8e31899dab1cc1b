"""A project's ``.mcp.json``: ``{"mcpServers": {name: {command, args, env} | {type, url, headers}}}``.

Each entry becomes a ``StdioServer`` (run in the folder of the file) or an
``HttpServer``; anything else raises ``ConfigError`` naming the file, the line
of the server when it can be found, the key and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.extensions.mcp.servers import HttpServer, MCPServer, StdioServer
from orchestrator.project.settings import ConfigError

MCP_FILE = ".mcp.json"
_STDIO = {"type", "command", "args", "env", "cwd"}
_HTTP = {"type", "url", "headers"}


def _line_of(text: str, name: str) -> int | None:
    needle = json.dumps(name)
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


def read_mcp_json(path: Path) -> tuple[MCPServer, ...]:
    """The servers ``path`` describes, in the file's order."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(path, None, f"cannot be read: {error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(path, None, f"is not valid JSON: {error.msg}", error.lineno) from None
    if not isinstance(data, dict):
        raise ConfigError(path, None, f"must be a JSON object, got {type(data).__name__}")
    for key in data:
        if key != "mcpServers":
            raise ConfigError(path, key, "unknown key (known: mcpServers)", _line_of(text, key))
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError(path, "mcpServers", f"must be an object of servers, got {type(servers).__name__}")
    found: list[MCPServer] = []
    for name, entry in servers.items():
        key = f"mcpServers.{name}"
        line = _line_of(text, name)
        if not isinstance(entry, dict):
            raise ConfigError(path, key, f"a server must be an object, got {type(entry).__name__} {entry!r}", line)
        found.append(_server(path, key, line, name, entry))
    return tuple(found)


def _server(path: Path, key: str, line: int | None, name: str, entry: dict[str, Any]) -> MCPServer:
    kind = entry.get("type", "stdio" if "command" in entry else "http" if "url" in entry else None)
    if kind is None:
        raise ConfigError(path, key, "a server needs a command (stdio) or a url (http)", line)
    if kind not in ("stdio", "http", "streamable-http"):
        raise ConfigError(path, f"{key}.type", f"unknown server type {kind!r} (stdio, http)", line)
    allowed = _STDIO if kind == "stdio" else _HTTP
    for field in entry:
        if field not in allowed:
            raise ConfigError(path, f"{key}.{field}", f"unknown key (known: {', '.join(sorted(allowed))})", line)
    try:
        if kind == "stdio":
            if "command" not in entry:
                raise ValueError("command is missing")
            return StdioServer(
                name=name,
                command=entry["command"],
                args=entry.get("args", ()),
                env=entry.get("env"),
                cwd=entry.get("cwd", str(path.parent)),
            )
        if "url" not in entry:
            raise ValueError("url is missing")
        return HttpServer(name=name, url=entry["url"], headers=entry.get("headers", {}))
    except (TypeError, ValueError) as error:
        raise ConfigError(path, key, str(error), line) from None

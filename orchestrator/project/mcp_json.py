"""A project's ``.mcp.json``: ``{"mcpServers": {name: {command, args, env} | {type, url, headers}}}``.

Each entry becomes a ``StdioServer`` (run in the folder of the file) or an
``HttpServer``; anything else raises ``ConfigError`` naming the file, the line
of the server when it can be found, the key and the reason.

``${VAR}`` and ``${VAR:-default}`` in ``command``, each of ``args``, the values
of ``env`` and ``headers``, and ``url`` are replaced from the environment when
the file is read (the default when ``VAR`` is unset or empty); a ``${VAR}``
with no value and no default raises ``ConfigError`` naming the server, the
field and the variable.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from orchestrator.extensions.mcp.servers import HttpServer, MCPServer, StdioServer
from orchestrator.project.settings import ConfigError

MCP_FILE = ".mcp.json"
_STDIO = {"type", "command", "args", "env", "cwd"}
_HTTP = {"type", "url", "headers"}
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


@attrs.frozen
class Expansion:
    """One ``${VAR}`` of a server's entry: its ``field`` (``args[1]``, ``env.TOKEN`` ...), the variable, and
    whether its value came from the ``environment`` or the reference's ``default``."""

    field: str
    variable: str
    source: Literal["environment", "default"]

    @property
    def reference(self) -> str:
        return "${" + self.variable + "}"


@attrs.frozen
class DeclaredServer:
    """A server of the file, its variables replaced, and the replacements made."""

    server: MCPServer
    expansions: tuple[Expansion, ...] = ()


def _line_of(text: str, name: str) -> int | None:
    needle = json.dumps(name)
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


def read_mcp_json(path: Path, environ: Mapping[str, str] | None = None) -> tuple[DeclaredServer, ...]:
    """The servers ``path`` describes, in the file's order, ``${VAR}`` taken from ``environ`` (default: the
    process environment)."""
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
    found: list[DeclaredServer] = []
    for name, entry in servers.items():
        key = f"mcpServers.{name}"
        line = _line_of(text, name)
        if not isinstance(entry, dict):
            raise ConfigError(path, key, f"a server must be an object, got {type(entry).__name__} {entry!r}", line)
        expander = _Expander(path, text, key, line, os.environ if environ is None else environ)
        expanded = expander.entry(entry)
        found.append(DeclaredServer(_server(path, key, line, name, expanded), tuple(expander.made)))
    return tuple(found)


class _Expander:
    """Replaces the ``${VAR}`` of one server's fields, remembering each replacement."""

    def __init__(self, path: Path, text: str, key: str, line: int | None, environ: Mapping[str, str]) -> None:
        self.path = path
        self.text = text
        self.key = key
        self.line = line
        self.environ = environ
        self.made: list[Expansion] = []

    def entry(self, entry: dict[str, Any]) -> dict[str, Any]:
        expanded = dict(entry)
        for field in ("command", "url"):
            if isinstance(entry.get(field), str):
                expanded[field] = self.value(field, entry[field])
        if isinstance(entry.get("args"), list):
            expanded["args"] = [
                self.value(f"args[{index}]", arg) if isinstance(arg, str) else arg
                for index, arg in enumerate(entry["args"])
            ]
        for table in ("env", "headers"):
            if isinstance(entry.get(table), dict):
                expanded[table] = {
                    name: self.value(f"{table}.{name}", value) if isinstance(value, str) else value
                    for name, value in entry[table].items()
                }
        return expanded

    def value(self, field: str, text: str) -> str:
        def replace(match: re.Match[str]) -> str:
            variable, has_default, default = match[1], match[2] is not None, match[3] or ""
            found = self.environ.get(variable)
            if found is not None and (found or not has_default):
                self.made.append(Expansion(field, variable, "environment"))
                return found
            if has_default:
                self.made.append(Expansion(field, variable, "default"))
                return default
            raise ConfigError(
                self.path,
                f"{self.key}.{field}",
                f"${{{variable}}} is not set in the environment and has no default (write ${{{variable}:-DEFAULT}})",
                self._line_of_reference(match[0]),
            )

        return _REFERENCE.sub(replace, text)

    def _line_of_reference(self, reference: str) -> int | None:
        lines = self.text.splitlines()
        for number in range(self.line or 1, len(lines) + 1):
            if reference in lines[number - 1]:
                return number
        return self.line


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

"""How to reach one MCP server: a command spoken to over stdio, or a streamable HTTP URL."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _check_name(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(f"an MCP server name must be 1-64 letters, digits, '_' or '-', got {value!r}")


def _positive(instance: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number of seconds, got {value!r}")


def _strings(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"args must be a sequence of strings, not one string: {value!r}")
    found = tuple(value)
    for item in found:
        if not isinstance(item, str):
            raise TypeError(f"args must be strings, got {item!r}")
    return found


def _string_map(value: Mapping[str, str] | None) -> Mapping[str, str] | None:
    if value is None:
        return None
    found = dict(value)
    for key, item in found.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"environment variables and headers map strings to strings, got {key!r}: {item!r}")
    return found


def _headers(value: Mapping[str, str]) -> Mapping[str, str]:
    return _string_map(value) or {}


@attrs.frozen(kw_only=True)
class MCPServer:
    """What every server has: its ``name``, its tools' name ``prefix`` and its time limits.

    Its tools are offered to the model as ``prefix + tool name``; the prefix
    defaults to ``name + "__"`` ("" offers the server's own names). A server
    must be started (spawned or reached, handshake done, tools listed) within
    ``connect_timeout`` seconds and answer each call within ``call_timeout``
    seconds; otherwise it is failed and restarted by the next request.
    """

    name: str = attrs.field(validator=_check_name)
    prefix: str | None = None
    connect_timeout: float = attrs.field(default=30.0, validator=_positive)
    call_timeout: float = attrs.field(default=120.0, validator=_positive)

    @property
    def tool_prefix(self) -> str:
        return f"{self.name}__" if self.prefix is None else self.prefix

    def describe(self) -> str:
        """How the server is reached, for messages."""
        raise NotImplementedError


@attrs.frozen(kw_only=True)
class StdioServer(MCPServer):
    """A server run as ``command *args`` and spoken to over its stdin and stdout.

    ``env`` adds to the few inherited variables (PATH, HOME, ...); ``cwd`` is
    its working directory. What it writes to stderr is kept, and the end of it
    is quoted when the server fails.
    """

    command: str
    args: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    env: Mapping[str, str] | None = attrs.field(default=None, converter=_string_map)
    cwd: str | None = None

    def describe(self) -> str:
        return " ".join([self.command, *self.args])


@attrs.frozen(kw_only=True)
class HttpServer(MCPServer):
    """A server reached over streamable HTTP at ``url``, every request carrying ``headers``."""

    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_headers)

    def __attrs_post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"an MCP server URL must be http:// or https://, got {self.url!r}")

    def describe(self) -> str:
        return self.url

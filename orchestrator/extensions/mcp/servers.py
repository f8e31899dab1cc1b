"""How to reach one MCP server: a command spoken to over stdio, or a streamable HTTP URL.

Every field is checked when the value is made: a value of the wrong type is a
``TypeError``, a value out of range a ``ValueError``, both naming the field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_PREFIX = re.compile(r"[A-Za-z0-9_-]{0,63}")

#: How many bytes one message from a stdio server may have (its line, without the newline).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: How many bytes of a stdio server's stderr are kept (its last ones).
MAX_STDERR_BYTES = 64 * 1024
#: How many of a server's tools are offered (the first ones it lists).
MAX_TOOLS = 256
#: How many bytes a tool's input schema may have, serialized as JSON; a tool with a larger one is left out.
MAX_SCHEMA_BYTES = 64 * 1024


def _check_name(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"name must be a string, got {value!r}")
    if not _NAME.fullmatch(value):
        raise ValueError(f"an MCP server name must be 1-64 letters, digits, '_' or '-', got {value!r}")


def _check_prefix(instance: Any, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"prefix must be a string or None, got {value!r}")
    if not _PREFIX.fullmatch(value):
        raise ValueError(f"prefix must be at most 63 letters, digits, '_' or '-', got {value!r}")


def _positive(instance: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{attribute.name} must be a number of seconds, got {value!r}")
    if not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number of seconds, got {value!r}")


def _count(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value!r}")


def _text(field: str, value: Any, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a string, got {value!r}")
    if "\0" in value:
        raise ValueError(f"{field} must not contain a NUL character, got {value!r}")
    if not empty and not value:
        raise ValueError(f"{field} must not be empty")
    return value


def _check_command(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str):
        hint = " (put the program in command and the rest in args)" if isinstance(value, (list, tuple)) else ""
        raise TypeError(f"command must be a string{hint}, got {value!r}")
    _text("command", value, empty=False)


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"args must be a sequence of strings, got {value!r}")
    return tuple(_text("each of args", item) for item in value)


def _string_map(field: str, value: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{field} must be a mapping of strings to strings, got {value!r}")
    found = dict(value)
    for key, item in found.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"{field} must map strings to strings, got {key!r}: {item!r}")
    return found


def _environment(value: Mapping[str, str] | None) -> Mapping[str, str] | None:
    if value is None:
        return None
    found = _string_map("env", value)
    for key, item in found.items():
        if not key or "=" in key or "\0" in key or "\0" in item:
            raise ValueError(f"env has a variable no process can carry: {key!r}: {item!r}")
    return found


def _headers(value: Mapping[str, str]) -> Mapping[str, str]:
    found = _string_map("headers", value)
    for key, item in found.items():
        if not key or any(character in key + item for character in "\r\n\0"):
            raise ValueError(f"headers has a header no request can carry: {key!r}: {item!r}")
    return found


def _directory(value: str | os.PathLike[str] | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return _text("cwd", value, empty=False)


@attrs.frozen(kw_only=True)
class MCPServer:
    """What every server has: its ``name``, its tools' name ``prefix``, its time limits and its tool limits.

    Its tools are offered to the model as ``prefix + tool name``; the prefix
    defaults to ``name + "__"`` ("" offers the server's own names). A server
    must be started (spawned or reached, handshake done, tools listed) within
    ``connect_timeout`` seconds and answer each call within ``call_timeout``
    seconds; otherwise it is failed and restarted by the next request. Of its
    listing, the first ``max_tools`` tools whose input schema has at most
    ``max_schema_bytes`` bytes (as JSON) are offered; the rest are left out, with a warning.
    """

    name: str = attrs.field(validator=_check_name)
    prefix: str | None = attrs.field(default=None, validator=_check_prefix)
    connect_timeout: float = attrs.field(default=30.0, validator=_positive)
    call_timeout: float = attrs.field(default=120.0, validator=_positive)
    max_tools: int = attrs.field(default=MAX_TOOLS, validator=_count)
    max_schema_bytes: int = attrs.field(default=MAX_SCHEMA_BYTES, validator=_count)

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
    its working directory. Each message it sends (one line) may have at most
    ``max_message_bytes`` bytes: a larger answer fails its call. The last
    ``max_stderr_bytes`` of what it writes to stderr are kept, and their end
    is quoted when the server fails.
    """

    command: str = attrs.field(validator=_check_command)
    args: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    env: Mapping[str, str] | None = attrs.field(default=None, converter=_environment)
    cwd: str | None = attrs.field(default=None, converter=_directory)
    max_message_bytes: int = attrs.field(default=MAX_MESSAGE_BYTES, validator=_count)
    max_stderr_bytes: int = attrs.field(default=MAX_STDERR_BYTES, validator=_count)

    def describe(self) -> str:
        return " ".join([self.command, *self.args])


def _check_url(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    _text("url", value)
    if not value.startswith(("http://", "https://")) or any(character.isspace() for character in value):
        raise ValueError(f"an MCP server URL must be http:// or https:// without spaces, got {value!r}")


@attrs.frozen(kw_only=True)
class HttpServer(MCPServer):
    """A server reached over streamable HTTP at ``url``, every request carrying ``headers``."""

    url: str = attrs.field(validator=_check_url)
    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_headers)

    def describe(self) -> str:
        return self.url

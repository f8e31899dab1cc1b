"""An incremental Server-Sent Events parser: bytes to lines to events, each bounded in size."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterable

import attrs

from orchestrator.providers.errors import MalformedStreamError

__all__ = ["MAX_SSE_LINE_BYTES", "ServerSentEvent", "parse_sse", "split_lines"]

#: The longest line (and the largest event's data) accepted from a stream: 8 MiB.
MAX_SSE_LINE_BYTES = 8 * 1024 * 1024

_LINE_END = re.compile(rb"\r\n|\r|\n")


@attrs.frozen
class ServerSentEvent:
    """One dispatched event: its type, its data (lines joined by newlines), id and retry."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


async def split_lines(
    chunks: AsyncIterable[bytes], max_line_bytes: int = MAX_SSE_LINE_BYTES
) -> AsyncGenerator[str, None]:
    """The lines of a byte stream (ended by CRLF, LF or CR), decoded as UTF-8 with
    invalid bytes replaced. A line longer than ``max_line_bytes`` raises
    MalformedStreamError as soon as that many bytes of it have arrived."""
    parts: list[bytes] = []
    size = 0
    skip_lf = False
    async for chunk in chunks:
        if skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        skip_lf = False
        start = 0
        for end in _LINE_END.finditer(chunk):
            size += end.start() - start
            if size > max_line_bytes:
                raise MalformedStreamError(f"a stream line is longer than {max_line_bytes} bytes")
            parts.append(chunk[start : end.start()])
            yield b"".join(parts).decode("utf-8", "replace")
            parts, size = [], 0
            start = end.end()
            skip_lf = end.group() == b"\r" and start == len(chunk)
        size += len(chunk) - start
        if size > max_line_bytes:
            raise MalformedStreamError(f"a stream line is longer than {max_line_bytes} bytes")
        if start < len(chunk):
            parts.append(chunk[start:])
    if parts:
        yield b"".join(parts).decode("utf-8", "replace")


async def parse_sse(
    lines: AsyncIterable[str], max_data_chars: int = MAX_SSE_LINE_BYTES
) -> AsyncGenerator[ServerSentEvent, None]:
    """Yield each event of a stream of lines (without their line terminators).

    Follows the WHATWG rules: ``field: value`` lines (one leading space of the
    value dropped), ``:`` comments ignored, several ``data`` lines joined by
    newlines, and a blank line dispatching the event; an event with no data is
    not dispatched. Unlike a browser, a last event that the stream ends
    without a blank line after is still dispatched. An event whose data
    grows past ``max_data_chars`` raises MalformedStreamError.
    """
    event = ""
    data: list[str] = []
    size = 0
    last_id: str | None = None
    retry: int | None = None
    first = True
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if first:
            line = line.removeprefix("\ufeff")
            first = False
        if not line:
            if data:
                yield ServerSentEvent(event or "message", "\n".join(data), last_id, retry)
            event, data, size = "", [], 0
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            size += len(value) + 1
            if size > max_data_chars:
                raise MalformedStreamError(f"a stream event's data is longer than {max_data_chars} characters")
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            if "\0" not in value:
                last_id = value
        elif name == "retry" and value.isdigit():
            retry = int(value)
    if data:
        yield ServerSentEvent(event or "message", "\n".join(data), last_id, retry)

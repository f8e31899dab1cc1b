"""An incremental Server-Sent Events parser over an async iterator of lines."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable

import attrs

__all__ = ["ServerSentEvent", "parse_sse"]


@attrs.frozen
class ServerSentEvent:
    """One dispatched event: its type, its data (lines joined by newlines), id and retry."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


async def parse_sse(lines: AsyncIterable[str]) -> AsyncGenerator[ServerSentEvent, None]:
    """Yield each event of a stream of lines (without their line terminators).

    Follows the WHATWG rules: ``field: value`` lines (one leading space of the
    value dropped), ``:`` comments ignored, several ``data`` lines joined by
    newlines, and a blank line dispatching the event; an event with no data is
    not dispatched. Unlike a browser, a last event that the stream ends
    without a blank line after is still dispatched.
    """
    event = ""
    data: list[str] = []
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
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
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

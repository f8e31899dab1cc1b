"""The HTTP traffic of the service's runs as its readers received it, for the server floor (``bench.sse_floor_app``).

A reader that records (``bench.sse_cells.read_sse(..., record=True)``) keeps, per run, the 202's JSON body, the
event stream's request id, and every body chunk of the stream with its arrival after the stream's headers: the
server sends one chunk (chunked transfer encoding) per ASGI write, so the chunks are the service's writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

#: Headers the server writes itself; the floor app leaves them to it.
SERVER_HEADERS = frozenset({"date", "server", "transfer-encoding", "connection", "content-length"})


def _kept(headers: Sequence[tuple[bytes, bytes]]) -> list[list[str]]:
    kept = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in headers]
    return [[name, value] for name, value in kept if name not in SERVER_HEADERS]


@attrs.define
class RecordedRun:
    """One run's answers as one reader received them."""

    session: str
    accepted: str = ""
    accepted_headers: list[list[str]] = attrs.field(factory=list)
    request_id: str = ""
    stream_headers: list[list[str]] = attrs.field(factory=list)
    chunks: list[tuple[float, str]] = attrs.field(factory=list)
    """Each body chunk of the event stream, with its arrival in seconds after the stream's headers."""
    _opened: float = 0.0

    def accept(self, headers: Sequence[tuple[bytes, bytes]], body: str) -> None:
        self.accepted_headers, self.accepted = _kept(headers), body

    def stream(self, request_id: str, headers: Sequence[tuple[bytes, bytes]]) -> None:
        self.request_id, self.stream_headers, self._opened = request_id, _kept(headers), time.perf_counter()

    def chunk(self, text: str) -> None:
        self.chunks.append((time.perf_counter() - self._opened, text))


@attrs.frozen
class Traffic:
    """Every recorded run, by session (its 202) and by request id (its stream), for the floor app to replay."""

    accepted_headers: list[list[str]]
    stream_headers: list[list[str]]
    accepted: dict[str, str]
    streams: dict[str, list[tuple[float, str]]]

    @classmethod
    def of(cls, runs: Sequence[RecordedRun]) -> Traffic:
        if not runs:
            raise ValueError("no run was recorded")
        return cls(
            accepted_headers=runs[0].accepted_headers,
            stream_headers=runs[0].stream_headers,
            accepted={run.session: run.accepted for run in runs},
            streams={run.request_id: run.chunks for run in runs},
        )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(attrs.asdict(self)), encoding="utf-8")

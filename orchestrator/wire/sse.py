"""Building blocks for applications that serve runs on routes of their own: SSE frames and answers as JSON.

``sse_frame`` writes one event as a Server-Sent Event (``id`` its seq, so a
browser's ``Last-Event-ID`` resumes after it; ``event`` its type; ``data`` its
wire JSON). ``encode_pending`` and ``encode_delivery`` give the JSON the
service itself answers with for a waiting call and for a delivered event.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from orchestrator.delivery import Delivery
from orchestrator.events import AgentEvent
from orchestrator.runtime.pending import PendingCall
from orchestrator.wire.format import encode_event

_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""The frames' JSON writer, built once (``json.dumps`` with these options builds an encoder on every call)."""


def _chunk_writer() -> Callable[[Mapping[str, Any], int], Iterable[str]]:
    """``_COMPACT``'s C writer, made once: a call gives the JSON of one object as chunks, with the same text as
    ``_COMPACT.encode``. ``encode`` remakes that writer on every call and checks for cycles, which wire JSON
    cannot hold, which costs about a third of a frame. Without the C accelerator, ``_COMPACT.encode`` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    strings = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or strings is None:
        return lambda data, _level: (_COMPACT.encode(data),)
    writer: Callable[[Mapping[str, Any], int], Iterable[str]] = make(
        None, _COMPACT.default, strings, None, ":", ",", False, False, True
    )
    return writer


_WRITE = _chunk_writer()

CLOSING_EVENT = "closing"
"""The SSE event type of the last frame of a stream the server ends before the run does (see ``sse_closing_frame``)."""


def sse_frame(event: AgentEvent | Mapping[str, Any]) -> str:
    """One Server-Sent Event for ``event`` (an AgentEvent or its wire JSON): id its seq, event its type, data JSON."""
    return _frame(encode_event(event) if isinstance(event, AgentEvent) else event)


def sse_frames(batch: Iterable[Mapping[str, Any]]) -> bytes:
    """The frames (``sse_frame``) of a batch of events' wire JSON, as one UTF-8 chunk of a response body."""
    return "".join([_frame(data) for data in batch]).encode()


def _frame(data: Mapping[str, Any]) -> str:
    return f"id: {data['seq']}\nevent: {data['type']}\ndata: {''.join(_WRITE(data, 0))}\n\n"


def sse_error_frame(error: BaseException) -> str:
    """The last frame of a stream that cannot go on: ``event: error`` with the reason, no ``id``."""
    data = json.dumps({"type": "error", "error": {"type": type(error).__name__, "message": str(error)}})
    return f"event: error\ndata: {data}\n\n"


def sse_closing_frame(reason: str) -> str:
    """The last frame of a stream the server ends while the run may go on: ``event: closing`` with the reason.

    It has no ``id``: a client reconnects with the ``Last-Event-ID`` of the last event it got and misses nothing.
    """
    data = json.dumps({"type": CLOSING_EVENT, "reason": reason}, ensure_ascii=False)
    return f"event: {CLOSING_EVENT}\ndata: {data}\n\n"


def encode_pending(call: PendingCall) -> dict[str, Any]:
    """A call waiting for an answer as JSON (its fields; ``payload`` as a plain object)."""
    return {**attrs.asdict(call, recurse=False), "payload": dict(call.payload)}


def encode_delivery(delivery: Delivery) -> dict[str, Any]:
    """A delivered event's outcome as JSON: ``event``, ``accepted`` (names), ``refused`` (name: reason), ``reason``."""
    return {
        "event": delivery.event,
        "accepted": list(delivery.accepted),
        "refused": dict(delivery.refused),
        "reason": delivery.reason,
    }

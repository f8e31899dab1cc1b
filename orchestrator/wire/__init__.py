"""The wire format (``format``: events, messages and errors as JSON) and the JSON Schema it is written in (``schema``).

The names of ``orchestrator.wire.format`` are re-exported here: ``orchestrator.wire.dumps`` and
``from orchestrator.wire import encode_event`` keep working.
"""

from orchestrator.wire.format import (
    ENVELOPE,
    RemoteError,
    WireFormatError,
    decode_error,
    decode_event,
    decode_message,
    dumps,
    encode_error,
    encode_event,
    encode_message,
    event_classes,
    json_value,
    loads,
)

__all__ = [
    "ENVELOPE",
    "RemoteError",
    "WireFormatError",
    "decode_error",
    "decode_event",
    "decode_message",
    "dumps",
    "encode_error",
    "encode_event",
    "encode_message",
    "event_classes",
    "json_value",
    "loads",
]

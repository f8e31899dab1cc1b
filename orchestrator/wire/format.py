"""The JSON wire format of events, messages and errors.

``encode_event`` turns any event into a JSON-ready dict: ``type`` (the event's
name), ``session_id``, ``request_id``, ``seq``, ``ts``, then the event's own
fields in declaration order. Messages, tool calls and usage become JSON
objects, tuples become arrays, an error becomes ``{"type": "<class name>",
"message": "..."}`` (never a repr), image bytes become base64 text. An
ExtensionEvent carries its free payload under ``payload``.

``decode_event`` is the inverse: ``decode_event(encode_event(e)) == e`` for
every event class except that an error comes back as a RemoteError (its class
name and message); a type no class declares decodes to an ExtensionEvent.
Input that does not fit raises WireFormatError naming the offending field, so
data from a network peer is checked, never trusted.

The codec of each field is derived from the event class's type hints; the
same derivation writes the JSON Schema (see ``orchestrator.wire.schema``).
"""

from __future__ import annotations

import base64
import binascii
import enum
import importlib
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from orchestrator.errors import AgentError
from orchestrator.events import AgentEvent, ExtensionEvent
from orchestrator.messages import (
    AssistantMessage,
    ContentPart,
    ImagePart,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
)
from orchestrator.model import Usage
from orchestrator.text import clean_text

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

ENVELOPE = ("type", "session_id", "request_id", "seq", "ts")
"""The keys every encoded event starts with."""

BUNDLED_EVENT_MODULES = (
    "orchestrator.events.features",
    "orchestrator.extensions.ask_user",
    "orchestrator.extensions.client_tools",
    "orchestrator.extensions.files.bash",
    "orchestrator.extensions.guardrails",
    "orchestrator.extensions.plan_mode",
    "orchestrator.extensions.steering",
    "orchestrator.extensions.sqlite_store",
    "orchestrator.extensions.tool_approval",
)
"""Modules of the bundled extensions that declare events; imported before classes are listed."""

_ENVELOPE_FIELDS = frozenset({"session_id", "request_id", "seq", "ts"})

JSON = Any


class WireFormatError(AgentError, ValueError):
    """Data that is not a valid encoded event, message or error; ``path`` names the place."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class RemoteError(AgentError):
    """An error as it arrived over the wire: the class name it had and its message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemoteError):
            return NotImplemented
        return (self.type_name, self.message) == (other.type_name, other.message)

    def __hash__(self) -> int:
        return hash((self.type_name, self.message))

    def __repr__(self) -> str:
        return f"RemoteError({self.type_name!r}, {self.message!r})"


# errors ------------------------------------------------------------------------


def encode_error(error: BaseException) -> dict[str, str]:
    """``{"type": <class name>, "message": <str(error)>}``; a RemoteError keeps the name it arrived with."""
    if isinstance(error, RemoteError):
        return {"type": error.type_name, "message": error.message}
    try:
        message = str(error)
    except Exception:  # an exception whose __str__ fails still gets encoded
        message = ""
    return {"type": type(error).__name__, "message": clean_text(message)}


def decode_error(data: JSON, path: str = "error") -> RemoteError:
    """The RemoteError an encoded error describes."""
    body = _object(data, path)
    return RemoteError(_string(body.get("type"), f"{path}.type"), _string(body.get("message"), f"{path}.message"))


# messages ----------------------------------------------------------------------


def _encode_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    data = base64.b64encode(part.data).decode("ascii") if part.data is not None else None
    return {"type": "image", "url": part.url, "data": data, "media_type": part.media_type}


def _decode_part(data: JSON, path: str) -> ContentPart:
    body = _object(data, path)
    kind = body.get("type")
    if kind == "text":
        return TextPart(_string(body.get("text"), f"{path}.text"))
    if kind != "image":
        raise WireFormatError(f"{path}.type", f"expected 'text' or 'image', got {kind!r}")
    url = _optional_string(body.get("url"), f"{path}.url")
    encoded = _optional_string(body.get("data"), f"{path}.data")
    media_type = _string(body.get("media_type", "image/png"), f"{path}.media_type")
    raw = None
    if encoded is not None:
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise WireFormatError(f"{path}.data", "not base64 text") from None
    try:
        return ImagePart(url=url, data=raw, media_type=media_type)
    except ValueError as invalid:
        raise WireFormatError(path, str(invalid)) from None


def _encode_content(content: str | tuple[ContentPart, ...]) -> str | list[dict[str, Any]]:
    return content if isinstance(content, str) else [_encode_part(part) for part in content]


def _decode_content(data: JSON, path: str) -> str | tuple[ContentPart, ...]:
    """Text, or an array of parts."""
    if isinstance(data, str):
        return data
    if not isinstance(data, list):
        raise WireFormatError(path, f"expected a string or an array of parts, got {_json_kind(data)}")
    return tuple(_decode_part(part, f"{path}[{index}]") for index, part in enumerate(data))


def _encode_call(call: ToolCall) -> dict[str, Any]:
    encoded = {"id": call.id, "name": call.name, "arguments": json_value(call.arguments)}
    if call.invalid_arguments is not None:
        encoded["invalid_arguments"] = call.invalid_arguments
    return encoded


def _decode_call(data: JSON, path: str) -> ToolCall:
    body = _object(data, path)
    arguments = _object(body.get("arguments", {}), f"{path}.arguments")
    return ToolCall(
        _string(body.get("id"), f"{path}.id"),
        _string(body.get("name"), f"{path}.name"),
        dict(arguments),
        _optional_string(body.get("invalid_arguments"), f"{path}.invalid_arguments"),
    )


_REASONING_EXTRAS = ("signature", "data", "id")


def _encode_reasoning(block: ReasoningBlock) -> dict[str, Any]:
    encoded: dict[str, Any] = {"text": block.text}
    for key in _REASONING_EXTRAS:
        value = getattr(block, key)
        if value is not None:
            encoded[key] = value
    return encoded


def _decode_reasoning(data: JSON, path: str) -> ReasoningBlock:
    body = _object(data, path)
    extras = {key: _optional_string(body.get(key), f"{path}.{key}") for key in _REASONING_EXTRAS}
    return ReasoningBlock(_string(body.get("text", ""), f"{path}.text"), **extras)


def encode_message(message: Message) -> dict[str, Any]:
    """A message as a JSON object with its ``role`` first."""
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": _encode_content(message.content)}
    if isinstance(message, AssistantMessage):
        encoded: dict[str, Any] = {
            "role": "assistant",
            "content": message.content,
            "tool_calls": [_encode_call(call) for call in message.tool_calls],
        }
        if message.reasoning:
            encoded["reasoning"] = [_encode_reasoning(block) for block in message.reasoning]
        return encoded
    if isinstance(message, ToolMessage):
        tool: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "name": message.name,
            "content": _encode_content(message.content),
            "status": message.status.value,
        }
        if message.approval is not None:
            tool["approval"] = json_value(message.approval)
        return tool
    raise TypeError(f"not a message: {type(message).__name__}")


def decode_message(data: JSON, path: str = "message") -> Message:
    """The message ``encode_message`` wrote; WireFormatError for anything else."""
    body = _object(data, path)
    role = body.get("role")
    if role == "system":
        return SystemMessage(_string(body.get("content"), f"{path}.content"))
    if role == "user":
        return UserMessage(_decode_content(body.get("content"), f"{path}.content"))
    if role == "assistant":
        calls = _array(body.get("tool_calls", []), f"{path}.tool_calls")
        reasoning = _array(body.get("reasoning", []), f"{path}.reasoning")
        return AssistantMessage(
            _string(body.get("content", ""), f"{path}.content"),
            tuple(_decode_call(c, f"{path}.tool_calls[{i}]") for i, c in enumerate(calls)),
            reasoning=tuple(_decode_reasoning(r, f"{path}.reasoning[{i}]") for i, r in enumerate(reasoning)),
        )
    if role == "tool":
        status = _string(body.get("status", "succeeded"), f"{path}.status")
        if status not in ToolStatus._value2member_map_:
            raise WireFormatError(f"{path}.status", f"expected one of {[s.value for s in ToolStatus]}, got {status!r}")
        approval = body.get("approval")
        return ToolMessage(
            _string(body.get("tool_call_id"), f"{path}.tool_call_id"),
            _string(body.get("name"), f"{path}.name"),
            _decode_content(body.get("content"), f"{path}.content"),
            ToolStatus(status),
            None if approval is None else dict(_object(approval, f"{path}.approval")),
        )
    raise WireFormatError(f"{path}.role", f"expected 'system', 'user', 'assistant' or 'tool', got {role!r}")


_CACHE_COUNTS = ("cache_read_tokens", "cache_write_tokens")


def _encode_usage(usage: Usage) -> dict[str, int]:
    encoded = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    for key in _CACHE_COUNTS:
        value = getattr(usage, key)
        if value is not None:
            encoded[key] = value
    return encoded


def _decode_usage(data: JSON, path: str) -> Usage:
    body = _object(data, path)
    cache = {key: None if body.get(key) is None else _integer(body[key], f"{path}.{key}") for key in _CACHE_COUNTS}
    return Usage(
        _integer(body.get("input_tokens", 0), f"{path}.input_tokens"),
        _integer(body.get("output_tokens", 0), f"{path}.output_tokens"),
        **cache,
    )


# free JSON values --------------------------------------------------------------


def json_value(value: Any) -> JSON:
    """``value`` as JSON data: mappings and sequences recursively, messages, calls and errors encoded.

    What has no JSON form (a non-finite float, an arbitrary object) is written as its text,
    so encoding never fails part-way through a stream.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return json_value(value.value)
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [json_value(item) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, (SystemMessage, UserMessage, AssistantMessage, ToolMessage)):
        return encode_message(value)
    if isinstance(value, ToolCall):
        return _encode_call(value)
    if isinstance(value, ReasoningBlock):
        return _encode_reasoning(value)
    if isinstance(value, Usage):
        return _encode_usage(value)
    if isinstance(value, BaseException):
        return encode_error(value)
    if isinstance(value, AgentEvent):
        return encode_event(value)
    return str(value)


# field codecs derived from type hints ------------------------------------------


@attrs.frozen
class Codec:
    """How one Python type is written to JSON, read back, and described by JSON Schema."""

    encode: Callable[[Any], JSON]
    decode: Callable[[JSON, str], Any]
    schema: Mapping[str, Any]


def _same(value: Any) -> Any:
    return value


def _check(kind: type, label: str) -> Callable[[JSON, str], Any]:
    def decode(data: JSON, path: str) -> Any:
        if kind is float and isinstance(data, int) and not isinstance(data, bool):
            return float(data)
        if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
            raise WireFormatError(path, f"expected {label}, got {_json_kind(data)}")
        return data

    return decode


def _decode_mapping(data: JSON, path: str) -> dict[str, Any]:
    return dict(_object(data, path))


_REF = "#/$defs/"


def _one_role(kind: type[Message]) -> Codec:
    def decode(data: JSON, path: str) -> Message:
        message = decode_message(data, path)
        if not isinstance(message, kind):
            raise WireFormatError(f"{path}.role", f"expected a {kind.__name__}, got role {message.role!r}")
        return message

    return Codec(encode_message, decode, {"$ref": _REF + kind.__name__})


_LEAVES: dict[Any, Codec] = {
    str: Codec(_same, _check(str, "a string"), {"type": "string"}),
    int: Codec(_same, _check(int, "an integer"), {"type": "integer"}),
    float: Codec(_same, _check(float, "a number"), {"type": "number"}),
    bool: Codec(_same, _check(bool, "a boolean"), {"type": "boolean"}),
    type(None): Codec(_same, lambda d, p: _null(d, p), {"type": "null"}),
    Any: Codec(json_value, lambda d, p: d, {}),
    Message: Codec(encode_message, decode_message, {"$ref": _REF + "Message"}),
    SystemMessage: _one_role(SystemMessage),
    UserMessage: _one_role(UserMessage),
    AssistantMessage: _one_role(AssistantMessage),
    ToolMessage: _one_role(ToolMessage),
    ToolCall: Codec(_encode_call, _decode_call, {"$ref": _REF + "ToolCall"}),
    Usage: Codec(_encode_usage, _decode_usage, {"$ref": _REF + "Usage"}),
    BaseException: Codec(encode_error, decode_error, {"$ref": _REF + "Error"}),
}


def _null(data: JSON, path: str) -> None:
    if data is not None:
        raise WireFormatError(path, f"expected null, got {_json_kind(data)}")


_CODECS: dict[Any, Codec] = {}


def codec_for(hint: Any) -> Codec:
    """The codec of a type hint as written on an event field; TypeError for a type with no JSON form."""
    found = _CODECS.get(hint)
    if found is None:
        found = _CODECS[hint] = _derive(hint)
    return found


def _derive(hint: Any) -> Codec:
    if hint in _LEAVES:
        return _LEAVES[hint]
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if set(arguments) == set(typing.get_args(Message)):
            return _LEAVES[Message]
        return _union(arguments)
    if origin is typing.Literal:
        return Codec(_same, _literal(arguments), {"enum": list(arguments)})
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        item = codec_for(arguments[0])
        return Codec(
            lambda value: [item.encode(v) for v in value],
            lambda data, path: tuple(item.decode(v, f"{path}[{i}]") for i, v in enumerate(_array(data, path))),
            {"type": "array", "items": dict(item.schema)},
        )
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        return Codec(json_value, _decode_mapping, {"type": "object"})
    if isinstance(hint, type) and issubclass(hint, BaseException):
        return _LEAVES[BaseException]
    raise TypeError(f"no JSON form for an event field of type {hint!r}")


def _literal(values: tuple[Any, ...]) -> Callable[[JSON, str], Any]:
    def decode(data: JSON, path: str) -> Any:
        if data not in values:
            raise WireFormatError(path, f"expected one of {list(values)}, got {data!r}")
        return data

    return decode


def _union(arms: tuple[Any, ...]) -> Codec:
    codecs = [codec_for(arm) for arm in arms]
    python_types = [typing.get_origin(arm) or arm for arm in arms]

    def encode(value: Any) -> JSON:
        for kind, codec in zip(python_types, codecs, strict=True):
            if isinstance(kind, type) and isinstance(value, kind):
                return codec.encode(value)
        return json_value(value)

    def decode(data: JSON, path: str) -> Any:
        problems: list[str] = []
        for codec in codecs:
            try:
                return codec.decode(data, path)
            except WireFormatError as error:
                problems.append(error.problem)
        raise WireFormatError(path, " or ".join(problems))

    return Codec(encode, decode, {"anyOf": [dict(c.schema) for c in codecs]})


# events ------------------------------------------------------------------------


@attrs.frozen
class EventField:
    """One payload field of an event class and its codec."""

    name: str
    codec: Codec
    required: bool


_FIELDS: dict[type[AgentEvent], tuple[EventField, ...]] = {}


def event_fields(kind: type[AgentEvent]) -> tuple[EventField, ...]:
    """The payload fields of an event class (envelope left out), in declaration order."""
    found = _FIELDS.get(kind)
    if found is None:
        hints = typing.get_type_hints(kind)
        found = tuple(
            EventField(field.name, codec_for(hints[field.name]), field.default is attrs.NOTHING)
            for field in attrs.fields(kind)
            if field.name not in _ENVELOPE_FIELDS
        )
        _FIELDS[kind] = found
    return found


def _subclasses(kind: type[AgentEvent]) -> list[type[AgentEvent]]:
    found: list[type[AgentEvent]] = []
    for sub in kind.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def event_classes(*, library_only: bool = False) -> dict[str, type[AgentEvent]]:
    """Every event class that declares its own ``kind``, by kind (bundled extensions' included).

    A class of an application counts once its module is imported, unless
    ``library_only``. Two classes declaring one kind are an error: the wire
    could not tell them apart.
    """
    for module in BUNDLED_EVENT_MODULES:
        importlib.import_module(module)
    classes: dict[str, type[AgentEvent]] = {}
    for kind in _subclasses(AgentEvent):
        if "kind" not in kind.__dict__ or "__attrs_attrs__" not in kind.__dict__:
            continue  # no kind of its own, or the class attrs replaced by its slotted copy
        if library_only and not kind.__module__.startswith("orchestrator."):
            continue
        other = classes.get(kind.kind)
        if other is not None and other is not kind:
            raise TypeError(f"{other.__qualname__} and {kind.__qualname__} both declare the event kind {kind.kind!r}")
        classes[kind.kind] = kind
    return dict(sorted(classes.items()))


def encode_event(event: AgentEvent) -> dict[str, Any]:
    """``event`` as a JSON-ready dict: the envelope, then its fields."""
    data: dict[str, Any] = {
        "type": event.name,
        "session_id": event.session_id,
        "request_id": event.request_id,
        "seq": event.seq,
        "ts": event.ts,
    }
    if isinstance(event, ExtensionEvent):
        data["payload"] = json_value(event.payload)
        return data
    for field in event_fields(type(event)):
        data[field.name] = field.codec.encode(getattr(event, field.name))
    return data


def decode_event(data: Mapping[str, Any]) -> AgentEvent:
    """The event ``encode_event`` wrote; an unknown ``type`` becomes an ExtensionEvent.

    The unknown type's ``payload`` object becomes the ExtensionEvent's payload
    (or, without one, every key beyond the envelope). Raises WireFormatError.
    """
    body = _object(data, "event")
    name = _string(body.get("type"), "event.type")
    envelope = {
        "session_id": _string(body.get("session_id", ""), "event.session_id"),
        "request_id": _string(body.get("request_id", ""), "event.request_id"),
        "seq": _check(int, "an integer")(body.get("seq", 0), "event.seq"),
        "ts": _check(float, "a number")(body.get("ts", 0.0), "event.ts"),
    }
    kind = event_classes().get(name)
    if kind is None:
        rest = {key: value for key, value in body.items() if key not in ENVELOPE}
        payload = rest["payload"] if set(rest) == {"payload"} and isinstance(rest["payload"], Mapping) else rest
        return ExtensionEvent(name=name, payload=dict(payload), **envelope)
    fields: dict[str, Any] = {}
    for field in event_fields(kind):
        if field.name in body:
            fields[field.name] = field.codec.decode(body[field.name], f"{name}.{field.name}")
        elif field.required:
            raise WireFormatError(f"{name}.{field.name}", "missing")
    unknown = set(body) - set(ENVELOPE) - {f.name for f in event_fields(kind)}
    if unknown:
        raise WireFormatError(name, f"unknown field(s) {sorted(unknown)}")
    try:
        return kind(**envelope, **fields)
    except (TypeError, ValueError) as invalid:
        raise WireFormatError(name, str(invalid)) from None


def dumps(event: AgentEvent) -> str:
    """``event`` as one line of JSON (non-ASCII kept) that always encodes as UTF-8.

    JSON's own syntax is ASCII, so cleaning the whole line only touches the
    strings in it (an extension event's payload, an error message).
    """
    return clean_text(json.dumps(encode_event(event), ensure_ascii=False, separators=(",", ":"), allow_nan=False))


def loads(line: str | bytes) -> AgentEvent:
    """The event one line of ``dumps`` output holds; WireFormatError for anything else."""
    try:
        data = json.loads(line)
    except ValueError as invalid:
        raise WireFormatError("event", f"not JSON: {invalid}") from None
    return decode_event(data)


# checks ------------------------------------------------------------------------


def _json_kind(data: JSON) -> str:
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "a boolean"
    if isinstance(data, (int, float)):
        return "a number"
    if isinstance(data, str):
        return "a string"
    if isinstance(data, (list, tuple)):
        return "an array"
    if isinstance(data, Mapping):
        return "an object"
    return type(data).__name__


def _object(data: JSON, path: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise WireFormatError(path, f"expected an object, got {_json_kind(data)}")
    return data


def _array(data: JSON, path: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(data, (list, tuple)):
        raise WireFormatError(path, f"expected an array, got {_json_kind(data)}")
    return data


def _string(data: JSON, path: str) -> str:
    if not isinstance(data, str):
        raise WireFormatError(path, f"expected a string, got {_json_kind(data)}")
    return data


def _optional_string(data: JSON, path: str) -> str | None:
    return None if data is None else _string(data, path)


def _integer(data: JSON, path: str) -> int:
    if not isinstance(data, int) or isinstance(data, bool):
        raise WireFormatError(path, f"expected an integer, got {_json_kind(data)}")
    return data

"""Messages as JSON text: the form every session store keeps them in.

``encode_message`` writes text that always encodes as UTF-8 (lone surrogates
become U+FFFD, pairs are joined). ``decode_message`` treats the stored text as
untrusted: anything that is not a message this module writes raises
``UndecodableMessage`` with the reason, never another error.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import attrs

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
from orchestrator.store.errors import StoreError
from orchestrator.store.interface import SessionChange, Unreadable
from orchestrator.text import clean_text

__all__ = [
    "ChangeRows",
    "UndecodableMessage",
    "change_rows",
    "decode_message",
    "encode_message",
    "json_default",
    "json_object",
    "placeholder",
]


class UndecodableMessage(ValueError):
    """Stored text that is not a message (bad JSON, an unknown role or status, a wrong type)."""


def _part_to_json(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    encoded = base64.b64encode(part.data).decode("ascii") if part.data is not None else None
    return {"type": "image", "url": part.url, "data": encoded, "media_type": part.media_type}


def _content_to_json(content: str | tuple[ContentPart, ...]) -> str | list[dict[str, Any]]:
    return content if isinstance(content, str) else [_part_to_json(part) for part in content]


def _content_from_json(data: Mapping[str, Any], role: str) -> str | tuple[ContentPart, ...]:
    """Text (every row written before results had parts holds text), or a list of parts."""
    content = data.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return tuple(_part_from_json(part) for part in content)
    raise UndecodableMessage(f"{role} content must be text or a list of parts, got {type(content).__name__}")


def _call_to_json(call: ToolCall) -> dict[str, Any]:
    data: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": call.arguments}
    if call.invalid_arguments is not None:
        data["invalid_arguments"] = call.invalid_arguments
    return data


_REASONING_EXTRAS = ("signature", "data", "id")


def _reasoning_to_json(block: ReasoningBlock) -> dict[str, Any]:
    data: dict[str, Any] = {"text": block.text}
    data.update((key, getattr(block, key)) for key in _REASONING_EXTRAS if getattr(block, key) is not None)
    return data


def encode_message(message: Message) -> str:
    """A message as JSON text that always encodes as UTF-8.

    Raises TypeError or ValueError for what JSON cannot hold (a circular value,
    a key that is not a string or number).
    """
    body: dict[str, Any]
    if isinstance(message, SystemMessage):
        body = {"content": message.content}
    elif isinstance(message, UserMessage):
        body = {"content": _content_to_json(message.content)}
    elif isinstance(message, AssistantMessage):
        calls = [_call_to_json(c) for c in message.tool_calls]
        body = {"content": message.content, "tool_calls": calls}
        if message.reasoning:
            body["reasoning"] = [_reasoning_to_json(r) for r in message.reasoning]
    else:
        body = {
            "tool_call_id": message.tool_call_id,
            "name": message.name,
            "content": _content_to_json(message.content),
            "status": str(message.status),
        }
        if message.approval is not None:
            body["approval"] = message.approval
    # JSON's own syntax is ASCII, so cleaning the whole text only touches the strings in it.
    return clean_text(json.dumps({"role": message.role, **body}, ensure_ascii=False, default=str))


def _field(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise UndecodableMessage(f"{key!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _part_from_json(data: object) -> ContentPart:
    if not isinstance(data, dict):
        raise UndecodableMessage("a content part must be an object")
    kind = data.get("type")
    if kind == "text":
        return TextPart(_field(data, "text", str))
    if kind != "image":
        raise UndecodableMessage(f"unknown content part type {kind!r}")
    media_type = _field(data, "media_type", str)
    url, encoded = data.get("url"), data.get("data")
    if url is not None and not isinstance(url, str):
        raise UndecodableMessage("an image url must be a string")
    if encoded is not None and not isinstance(encoded, str):
        raise UndecodableMessage("image data must be base64 text")
    try:
        raw = base64.b64decode(encoded, validate=True) if encoded is not None else None
        return ImagePart(url=url, data=raw, media_type=media_type)
    except (binascii.Error, ValueError) as bad:
        raise UndecodableMessage(f"bad image: {bad}") from None


#: How rows written before ToolCall.invalid_arguments existed hold argument text that was not a JSON object.
_LEGACY_INVALID = "__malformed_arguments__"


def _call_from_json(data: object) -> ToolCall:
    if not isinstance(data, dict):
        raise UndecodableMessage("a tool call must be an object")
    arguments = dict(_field(data, "arguments", dict))
    invalid = data.get("invalid_arguments")
    if invalid is not None and not isinstance(invalid, str):
        raise UndecodableMessage(f"'invalid_arguments' must be a str, got {type(invalid).__name__}")
    if invalid is None and set(arguments) == {_LEGACY_INVALID}:
        invalid, arguments = str(arguments[_LEGACY_INVALID]), {}
    return ToolCall(_field(data, "id", str), _field(data, "name", str), arguments, invalid)


def _reasoning_from_json(data: object) -> ReasoningBlock:
    if not isinstance(data, dict):
        raise UndecodableMessage("a reasoning block must be an object")
    extras: dict[str, str | None] = {}
    for key in _REASONING_EXTRAS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise UndecodableMessage(f"reasoning {key!r} must be a str, got {type(value).__name__}")
        extras[key] = value
    text = data.get("text", "")
    if not isinstance(text, str):
        raise UndecodableMessage(f"reasoning 'text' must be a str, got {type(text).__name__}")
    return ReasoningBlock(text, **extras)


def decode_message(text: str) -> Message:
    """The message ``encode_message`` wrote; UndecodableMessage for anything else."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as bad:
        raise UndecodableMessage(f"not JSON: {bad}") from None
    if not isinstance(data, dict):
        raise UndecodableMessage(f"a message must be a JSON object, got {type(data).__name__}")
    role = data.get("role")
    if role == "system":
        return SystemMessage(_field(data, "content", str))
    if role == "user":
        return UserMessage(_content_from_json(data, "user"))
    if role == "assistant":
        calls = tuple(_call_from_json(c) for c in _field(data, "tool_calls", list))
        stored = data.get("reasoning", [])
        if not isinstance(stored, list):
            raise UndecodableMessage(f"'reasoning' must be a list, got {type(stored).__name__}")
        reasoning = tuple(_reasoning_from_json(r) for r in stored)
        return AssistantMessage(_field(data, "content", str), calls, reasoning=reasoning)
    if role == "tool":
        status = _field(data, "status", str)
        if status not in {s.value for s in ToolStatus}:
            raise UndecodableMessage(f"unknown tool status {status!r}")
        approval = data.get("approval")
        if approval is not None and not isinstance(approval, dict):
            raise UndecodableMessage(f"'approval' must be an object, got {type(approval).__name__}")
        return ToolMessage(
            _field(data, "tool_call_id", str),
            _field(data, "name", str),
            _content_from_json(data, "tool"),
            status,
            approval,
        )
    raise UndecodableMessage(f"unknown message role {role!r}")


def placeholder(row_id: int, reason: str) -> UserMessage:
    """What stands in the history for a stored row that could not be read."""
    return UserMessage(f"[unreadable stored message (row {row_id}) left out: {reason}]")


def json_object(text: str | None) -> dict[str, Any] | None:
    """A stored JSON object (an approval's payload or answer), or None when it is absent or not one."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_default(value: object) -> object:
    """``json.dumps``'s fallback for payload values: collections as arrays, anything else as its text."""
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


@attrs.frozen
class ChangeRows:
    """A ``SessionChange`` as the rows a store writes: ``(session_id, position, role, body, created)``.

    ``replace`` is None when the change keeps the history; ``quarantine`` pairs each unreadable
    row with its placeholder's body; ``ended`` names the calls whose waits are over (dropped, or
    given a result by an appended message).
    """

    replace: list[tuple[str, int, str, str, float]] | None
    append: list[tuple[str, int, str, str, float]]
    quarantine: list[tuple[Unreadable, str]]
    ended: frozenset[str]


def change_rows(session_id: str, change: SessionChange, now: float) -> ChangeRows:
    """Encode ``change`` before any transaction starts; StoreError (nothing written) when a message cannot be."""
    try:
        replace = None
        if change.replace is not None:
            replace = [(session_id, i, m.role, encode_message(m), now) for i, m in enumerate(change.replace)]
        append = [(session_id, p, m.role, encode_message(m), now) for p, m in change.append]
        quarantine = [(u, encode_message(u.placeholder)) for u in change.quarantine]
    except (TypeError, ValueError) as bad:
        raise StoreError(f"a message of session {session_id!r} cannot be stored: {bad}") from bad
    results = {m.tool_call_id for _, m in change.append if isinstance(m, ToolMessage)}
    return ChangeRows(replace, append, quarantine, frozenset(change.drop_approvals) | results)

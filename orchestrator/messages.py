"""Conversation messages exchanged with models and kept in session history."""

from __future__ import annotations

import enum
from typing import Any, TypeAlias

import attrs


class ToolStatus(enum.StrEnum):
    """Outcome of one tool call."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


@attrs.frozen
class TextPart:
    """Plain text inside a multimodal message."""

    text: str


@attrs.frozen
class ImagePart:
    """An image given by URL or by raw bytes with a media type."""

    url: str | None = None
    data: bytes | None = None
    media_type: str = "image/png"

    def __attrs_post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise ValueError("ImagePart needs exactly one of url or data")


ContentPart: TypeAlias = TextPart | ImagePart


def _content(value: str | tuple[ContentPart, ...] | list[ContentPart]) -> str | tuple[ContentPart, ...]:
    if isinstance(value, str):
        return value
    parts = tuple(value)
    for part in parts:
        if not isinstance(part, (TextPart, ImagePart)):
            raise TypeError(f"unsupported content part: {part!r}")
    return parts


def text_of(content: str | tuple[ContentPart, ...]) -> str:
    """The text of a content value, images left out."""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


@attrs.frozen
class SystemMessage:
    """Instructions for the model."""

    content: str
    role: str = attrs.field(default="system", init=False)


@attrs.frozen
class UserMessage:
    """Input from the user: text, or text and image parts."""

    content: str | tuple[ContentPart, ...] = attrs.field(converter=_content)
    role: str = attrs.field(default="user", init=False)

    @property
    def text(self) -> str:
        return text_of(self.content)


def _arguments_mapping(instance: ToolCall, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict):
        raise TypeError(f"ToolCall.arguments must be a dict (a JSON object), got {type(value).__name__}")


@attrs.frozen
class ToolCall:
    """A tool invocation requested by the model."""

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict, validator=_arguments_mapping)


@attrs.frozen
class AssistantMessage:
    """A model response: text and the tool calls it requests."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=tuple[ToolCall, ...])
    role: str = attrs.field(default="assistant", init=False)


@attrs.frozen
class ToolMessage:
    """The one result of one tool call."""

    tool_call_id: str
    name: str
    content: str
    status: ToolStatus = attrs.field(default=ToolStatus.SUCCEEDED, converter=ToolStatus)
    role: str = attrs.field(default="tool", init=False)


Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage

"""Conversation messages exchanged with models and kept in session history."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias, TypeVar

import attrs

from machines.values import FieldValues
from orchestrator.checks import Check, of_type
from orchestrator.checks import text as _str
from orchestrator.text import clean_text, clean_value


class ToolStatus(enum.StrEnum):
    """Outcome of one tool call."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


@attrs.frozen(eq=False, repr=False)
class TextPart(FieldValues):
    """Plain text inside a multimodal message."""

    text: str = attrs.field(validator=_str())


_BYTES = (bytes, bytearray, memoryview)


@attrs.frozen(eq=False, repr=False)
class ImagePart(FieldValues):
    """An image given by URL or by raw bytes with a media type."""

    url: str | None = attrs.field(default=None, validator=_str(optional=True))
    data: bytes | None = attrs.field(default=None, validator=of_type(_BYTES, "bytes", optional=True))
    media_type: str = attrs.field(default="image/png", validator=_str(blank=False))

    def __attrs_post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise ValueError("ImagePart needs exactly one of url or data")


ContentPart: TypeAlias = TextPart | ImagePart


def _as_content(where: str, value: Any) -> str | tuple[ContentPart, ...]:
    """A ``content`` field's value: a str, or an iterable of TextPart / ImagePart made a tuple."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes) or not hasattr(value, "__iter__"):
        raise TypeError(f"{where} must be a str or content parts, got {type(value).__name__}")
    parts = tuple(value)
    for part in parts:
        if not isinstance(part, (TextPart, ImagePart)):
            raise TypeError(f"{where}: unsupported content part: {part!r}")
    return parts


def _user_content(value: str | tuple[ContentPart, ...] | list[ContentPart]) -> str | tuple[ContentPart, ...]:
    return _as_content("UserMessage.content", value)


def _tool_content(value: str | tuple[ContentPart, ...] | list[ContentPart]) -> str | tuple[ContentPart, ...]:
    return _as_content("ToolMessage.content", value)


def _as_tuple(where: str, kind: str, value: Any) -> tuple[Any, ...]:
    """``value`` as a tuple (a str or other non-iterable is a TypeError naming ``where`` and ``kind``)."""
    if type(value) is tuple:
        return value
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{where} must be an iterable of {kind}, got {type(value).__name__}")
    return tuple(value)


def _calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return _as_tuple("AssistantMessage.tool_calls", "ToolCall", value)


def _reasoning_blocks(value: Iterable[ReasoningBlock]) -> tuple[ReasoningBlock, ...]:
    return _as_tuple("AssistantMessage.reasoning", "ReasoningBlock", value)


def _all_of(kinds: type, what: str) -> Check:
    """Every item of an already converted tuple is a ``kinds``."""

    def test(where: str, value: Any) -> None:
        for index, item in enumerate(value):
            if not isinstance(item, kinds):
                raise TypeError(f"{where}[{index}] must be {what}, got {type(item).__name__}")

    return Check(test)


def _status(value: ToolStatus | str) -> ToolStatus:
    if type(value) is ToolStatus:
        return value
    if not isinstance(value, str):
        raise TypeError(f"ToolMessage.status must be a ToolStatus or str, got {type(value).__name__}")
    try:
        return ToolStatus(value)
    except ValueError:
        known = ", ".join(status.value for status in ToolStatus)
        raise ValueError(f"ToolMessage.status must be one of {known}, got {value!r}") from None


def text_of(content: str | tuple[ContentPart, ...]) -> str:
    """The text of a content value, images left out."""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


def describe_image(part: ImagePart) -> str:
    """An image as text: ``[image: image/png, 1234 bytes]``, or ``[image: image/png, <url>]``."""
    if part.data is not None:
        return f"[image: {part.media_type}, {len(part.data)} bytes]"
    return f"[image: {part.media_type}, {part.url}]"


def describe_parts(content: str | tuple[ContentPart, ...]) -> str:
    """A content value as text, each image replaced by its description (``describe_image``).

    What a reader that cannot see images gets: a model whose API takes no
    images in that place, a summary, a terminal.
    """
    if isinstance(content, str):
        return content
    return "".join(part.text if isinstance(part, TextPart) else describe_image(part) for part in content)


def images_of(content: str | tuple[ContentPart, ...]) -> tuple[ImagePart, ...]:
    """The image parts of a content value, in order."""
    if isinstance(content, str):
        return ()
    return tuple(part for part in content if isinstance(part, ImagePart))


@attrs.frozen(eq=False, repr=False)
class SystemMessage(FieldValues):
    """Instructions for the model."""

    content: str = attrs.field(validator=_str())
    role: str = attrs.field(default="system", init=False)


@attrs.frozen(eq=False, repr=False)
class UserMessage(FieldValues):
    """Input from the user: text, or text and image parts."""

    content: str | tuple[ContentPart, ...] = attrs.field(converter=_user_content)
    role: str = attrs.field(default="user", init=False)

    @property
    def text(self) -> str:
        return text_of(self.content)


def _approval_record(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"ToolMessage.approval must be a dict or None, got {type(value).__name__}")


def _arguments_mapping(instance: ToolCall, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict):
        raise TypeError(f"ToolCall.arguments must be a dict (a JSON object), got {type(value).__name__}")


@attrs.frozen(eq=False, repr=False)
class ToolCall(FieldValues):
    """A tool invocation requested by the model.

    ``invalid_arguments`` holds the model's argument text when it was not a
    JSON object (``arguments`` is then empty): such a call gets a failed result
    quoting it, and its tool does not run.
    """

    id: str = attrs.field(validator=_str())
    name: str = attrs.field(validator=_str())
    arguments: dict[str, Any] = attrs.field(factory=dict, validator=_arguments_mapping)
    invalid_arguments: str | None = attrs.field(default=None, validator=_str(optional=True))


@attrs.frozen(eq=False, repr=False)
class ReasoningBlock(FieldValues):
    """One piece of a model's reasoning, kept so it can be sent back on later turns.

    ``text`` is the reasoning the provider showed (may be empty or a summary),
    ``signature`` the provider's proof that the text is its own (Anthropic
    ``thinking`` blocks), ``data`` an opaque payload the provider wants back
    unchanged (Anthropic ``redacted_thinking``, OpenAI encrypted reasoning),
    ``id`` the provider's id for the item, when it has one.
    """

    text: str = attrs.field(default="", validator=_str())
    signature: str | None = attrs.field(default=None, validator=_str(optional=True))
    data: str | None = attrs.field(default=None, validator=_str(optional=True))
    id: str | None = attrs.field(default=None, validator=_str(optional=True))


@attrs.frozen(eq=False, repr=False)
class AssistantMessage(FieldValues):
    """A model response: text, the tool calls it requests, and the reasoning that came before them.

    ``reasoning`` holds the provider's reasoning blocks in the order they
    arrived; adapters send them back with the message on later turns where the
    provider requires it.
    """

    content: str = attrs.field(default="", validator=_str())
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), converter=_calls, validator=_all_of(ToolCall, "a ToolCall")
    )
    role: str = attrs.field(default="assistant", init=False)
    reasoning: tuple[ReasoningBlock, ...] = attrs.field(
        default=(), converter=_reasoning_blocks, validator=_all_of(ReasoningBlock, "a ReasoningBlock"), kw_only=True
    )


@attrs.frozen(eq=False, repr=False)
class ToolMessage(FieldValues):
    """The one result of one tool call: text, or text and image parts.

    ``approval`` records the answer of a call that asked for one (JSON data: ``approved``, ``answered_by``,
    ``answered_at``, ``arguments`` the call ran with, ``edited``, ``reason``); providers do not send it.
    """

    tool_call_id: str = attrs.field(validator=_str())
    name: str = attrs.field(validator=_str())
    content: str | tuple[ContentPart, ...] = attrs.field(converter=_tool_content)
    status: ToolStatus = attrs.field(default=ToolStatus.SUCCEEDED, converter=_status)
    approval: dict[str, Any] | None = attrs.field(default=None, validator=_approval_record, hash=False)
    role: str = attrs.field(default="tool", init=False)

    @property
    def text(self) -> str:
        """The text parts joined (images left out; ``describe_parts`` describes them)."""
        return text_of(self.content)


Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage


def clean_message(message: Message) -> Message:
    """``message`` with every text in it (content, parts, tool calls) made encodable as UTF-8.

    Lone surrogates become U+FFFD and split pairs are joined (``clean_text``); a
    message with nothing to clean is returned unchanged (the same object).
    """
    if isinstance(message, AssistantMessage):
        content = clean_text(message.content)
        calls = _cleaned_items(message.tool_calls, _clean_call)
        reasoning = _cleaned_items(message.reasoning, _clean_reasoning)
        if content is message.content and calls is message.tool_calls and reasoning is message.reasoning:
            return message
        return attrs.evolve(message, content=content, tool_calls=calls, reasoning=reasoning)
    if isinstance(message, SystemMessage):
        content = clean_text(message.content)
        return message if content is message.content else SystemMessage(content)
    if isinstance(message, ToolMessage):
        parts = _clean_content(message.content)
        call_id, name = clean_text(message.tool_call_id), clean_text(message.name)
        if parts is message.content and call_id is message.tool_call_id and name is message.name:
            return message
        return ToolMessage(call_id, name, parts, message.status, message.approval)
    cleaned = _clean_content(message.content)
    return message if cleaned is message.content else UserMessage(cleaned)


def _clean_reasoning(block: ReasoningBlock) -> ReasoningBlock:
    text = clean_text(block.text)
    signature = None if block.signature is None else clean_text(block.signature)
    data = None if block.data is None else clean_text(block.data)
    block_id = None if block.id is None else clean_text(block.id)
    if text is block.text and signature is block.signature and data is block.data and block_id is block.id:
        return block
    return ReasoningBlock(text, signature, data, block_id)


_Item = TypeVar("_Item")


def _cleaned_items(items: tuple[_Item, ...], clean: Callable[[_Item], _Item]) -> tuple[_Item, ...]:
    """``items`` with ``clean`` applied to each: the same tuple when every item came back as it was."""
    for index, item in enumerate(items):
        cleaned = clean(item)
        if cleaned is not item:
            return (*items[:index], cleaned, *(clean(rest) for rest in items[index + 1 :]))
    return items


def _clean_content(content: str | tuple[ContentPart, ...]) -> str | tuple[ContentPart, ...]:
    if isinstance(content, str):
        return clean_text(content)
    return _cleaned_items(content, _clean_part)


def _clean_part(part: ContentPart) -> ContentPart:
    if isinstance(part, TextPart):
        text = clean_text(part.text)
        return part if text is part.text else TextPart(text)
    url = None if part.url is None else clean_text(part.url)
    media_type = clean_text(part.media_type)
    if url is part.url and media_type is part.media_type:
        return part
    return attrs.evolve(part, url=url, media_type=media_type)


def _clean_call(call: ToolCall) -> ToolCall:
    call_id, name = clean_text(call.id), clean_text(call.name)
    arguments = clean_value(call.arguments) if call.arguments else call.arguments
    invalid = None if call.invalid_arguments is None else clean_text(call.invalid_arguments)
    if call_id is call.id and name is call.name and arguments is call.arguments and invalid is call.invalid_arguments:
        return call
    return ToolCall(id=call_id, name=name, arguments=arguments, invalid_arguments=invalid)


def user_message(value: str | UserMessage | Sequence[ContentPart]) -> UserMessage:
    """A request's input as a UserMessage: a str (its text), a UserMessage (itself) or content parts; TypeError
    for anything else."""
    if isinstance(value, UserMessage):
        return value
    if isinstance(value, str):
        return UserMessage(value)
    if isinstance(value, (list, tuple)):
        return UserMessage(tuple(value))
    kind = type(value).__name__
    raise TypeError(f"input must be a str, a UserMessage or a sequence of content parts, got {kind}")

"""What a tool's return value becomes in its ToolMessage: text, or text and bounded image parts.

A tool (or an ``on_tool_call`` / ``after_tool`` hook) may give an ``ImagePart``,
a ``TextPart``, or a list or tuple mixing them with plain strings: the result
then has parts. Anything else becomes text as before (``as_text``).

Every image is checked before it enters history, since an image a provider
refuses would make every later request of the session fail:

- a part of the wrong shape (image data that is not bytes, a list holding an
  object that is neither text nor a part) makes the call fail, saying what was
  wrong (``UnsupportedToolResult``);
- a ``data:`` URL image becomes the image with its bytes;
- an image with data of a type no provider takes (not PNG, JPEG, GIF or WebP),
  a URL that is not http(s), one larger than ``MAX_IMAGE_BYTES``, or one past ``MAX_RESULT_IMAGES`` or
  ``MAX_RESULT_IMAGE_BYTES`` for the whole result, is replaced by a text note
  saying so; the rest of the result is kept.

A result whose parts hold no image (left) is plain text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.messages import ContentPart, ImagePart, TextPart, describe_image
from orchestrator.text import clean_text

__all__ = [
    "IMAGE_MEDIA_TYPES",
    "MAX_IMAGE_BYTES",
    "MAX_RESULT_IMAGES",
    "MAX_RESULT_IMAGE_BYTES",
    "Content",
    "ToolResultContent",
    "UnsupportedToolResult",
    "as_text",
    "image_size",
    "tool_content",
]

#: Media types of image data every provider adapter can send.
IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: Largest image one result may carry: its data in bytes, or its URL's length (5 MiB, Anthropic's per-image limit).
MAX_IMAGE_BYTES = 5 * 1024 * 1024
#: Most images one result may carry.
MAX_RESULT_IMAGES = 20
#: Largest total of one result's images (counted as ``image_size`` counts them).
MAX_RESULT_IMAGE_BYTES = 20 * 1024 * 1024

Content = str | tuple[ContentPart, ...]
#: What a ToolResult's content may be set to (``tool_content`` turns it into a message's ``Content``).
ToolResultContent = str | ContentPart | Sequence[str | ContentPart]


class UnsupportedToolResult(TypeError):
    """A tool result value that cannot become a message; ``reason`` says what was wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def as_text(value: Any) -> str:
    """What the model sees of a tool's plain return value.

    Text as it is; bytes decoded as UTF-8; None as nothing; anything else as
    JSON (non-ASCII kept), with sets and tuples as arrays and other objects as
    their ``str``.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    import json  # loaded on first use: text results, the common case, do not need it

    try:
        return json.dumps(value, default=_jsonable, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _jsonable(value: Any) -> Any:
    """JSON's fallback for what it cannot encode (tuples it already writes as arrays)."""
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _has_parts(value: Any) -> bool:
    if isinstance(value, (TextPart, ImagePart)):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(item, (TextPart, ImagePart)) for item in value)


def tool_content(value: Any) -> Content:
    """``value`` as a ToolMessage's content: parts (checked and bounded) or text, all encodable as UTF-8.

    Raises UnsupportedToolResult for parts of the wrong shape.
    """
    if type(value) is str:
        return clean_text(value)
    if not _has_parts(value):
        return clean_text(as_text(value))
    items = [value] if isinstance(value, (TextPart, ImagePart)) else list(value)
    parts = _bounded([_part(item, index) for index, item in enumerate(items)])
    if not any(isinstance(part, ImagePart) for part in parts):
        return "".join(part.text for part in parts if isinstance(part, TextPart))
    return tuple(parts)


def _part(item: object, index: int) -> ContentPart:
    if isinstance(item, str):
        return TextPart(clean_text(item))
    if isinstance(item, TextPart):
        if not isinstance(item.text, str):
            raise UnsupportedToolResult(f"part {index}: TextPart.text is a {type(item.text).__name__}, not a str")
        return TextPart(clean_text(item.text))
    if isinstance(item, ImagePart):
        return _image(item, index)
    raise UnsupportedToolResult(
        f"part {index} is a {type(item).__name__}; a result's parts must be str, TextPart or ImagePart"
    )


def _image(part: ImagePart, index: int) -> ImagePart:
    if not isinstance(part.media_type, str):
        raise UnsupportedToolResult(f"part {index}: ImagePart.media_type is a {type(part.media_type).__name__}")
    if part.url is not None:
        if not isinstance(part.url, str):
            raise UnsupportedToolResult(f"part {index}: ImagePart.url is a {type(part.url).__name__}, not a str")
        if part.url[:5].lower() == "data:":
            return _from_data_url(part.url, index)
        return ImagePart(url=clean_text(part.url), media_type=clean_text(part.media_type))
    if not isinstance(part.data, (bytes, bytearray, memoryview)):
        raise UnsupportedToolResult(f"part {index}: ImagePart.data is a {type(part.data).__name__}, not bytes")
    return ImagePart(data=bytes(part.data), media_type=clean_text(part.media_type))


def _from_data_url(url: str, index: int) -> ImagePart:
    """A ``data:<media type>;base64,<data>`` URL as the image part holding its bytes."""
    header, comma, payload = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    if not comma or encoding.lower() != "base64":
        raise UnsupportedToolResult(f"part {index}: a data URL image must be data:<media type>;base64,<data>")
    import base64  # loaded on first use, like json above
    import binascii

    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise UnsupportedToolResult(f"part {index}: the data URL's image is not base64") from None
    return ImagePart(data=data, media_type=clean_text(media_type.strip().lower() or "image/png"))


def image_size(part: ImagePart) -> int:
    """What an image counts against the limits: its data's bytes, or its URL's length in UTF-8."""
    if part.data is not None:
        return len(part.data)
    return len((part.url or "").encode("utf-8", errors="replace"))


def _bounded(parts: list[ContentPart]) -> list[ContentPart]:
    """``parts`` with every image a provider could not take, or past the limits, replaced by a note."""
    kept: list[ContentPart] = []
    count = total = 0
    for part in parts:
        if not isinstance(part, ImagePart):
            kept.append(part)
            continue
        size = image_size(part)
        reason = None
        if part.url is not None and not part.url.lower().startswith(("https://", "http://")):
            reason = "an image URL must be http(s) or a base64 data URL"
        elif part.data is not None and part.media_type not in IMAGE_MEDIA_TYPES:
            reason = f"{part.media_type!r} is not one of {', '.join(sorted(IMAGE_MEDIA_TYPES))}"
        elif size > MAX_IMAGE_BYTES:
            reason = f"{size} bytes is over the {MAX_IMAGE_BYTES}-byte limit for one image"
        elif count >= MAX_RESULT_IMAGES:
            reason = f"a result carries at most {MAX_RESULT_IMAGES} images"
        elif total + size > MAX_RESULT_IMAGE_BYTES:
            reason = f"a result's images total at most {MAX_RESULT_IMAGE_BYTES} bytes"
        if reason is None:
            kept.append(part)
            count, total = count + 1, total + size
        else:
            described = describe_image(part) if part.data is not None else f"[image: {part.media_type}]"
            kept.append(TextPart(f"{described[:-1]} left out: {reason}]"))
    return kept

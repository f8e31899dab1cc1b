"""What the model reads of an MCP tool result: text, images and structured content as tool result parts.

Text blocks stay text, one a line. Images become image parts (decoded from
base64; the runtime then keeps those a provider can take and describes the
others, and providers that take no images in tool results read a description);
audio, resource links and embedded resources are described in text (an
embedded text resource is quoted). Structured content is added as JSON unless
the text blocks already carry it (the protocol asks servers to send both): a
text block that is its JSON, or, for an object whose values are all text,
every one of those texts. A result the server marks as an error is a failed
tool result.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

import mcp_types

from orchestrator.messages import ContentPart, ImagePart, TextPart, describe_parts
from orchestrator.tools import ToolResult

#: How many characters of text one result may carry before it is cut (saying so).
MAX_RESULT_CHARS = 100_000


def _decoded(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _size(data: str) -> str:
    raw = _decoded(data)
    return "invalid base64 data" if raw is None else f"{len(raw)} bytes"


def _block_parts(block: Any) -> list[ContentPart]:
    if isinstance(block, mcp_types.TextContent):
        return [TextPart(block.text)]
    if isinstance(block, mcp_types.ImageContent):
        raw = _decoded(block.data)
        if raw is None:
            return [TextPart(f"[image: {block.mime_type}, invalid base64 data]")]
        return [ImagePart(data=raw, media_type=block.mime_type)]
    if isinstance(block, mcp_types.AudioContent):
        return [TextPart(f"[audio: {block.mime_type}, {_size(block.data)}]")]
    if isinstance(block, mcp_types.ResourceLink):
        kind = f", {block.mime_type}" if block.mime_type else ""
        about = f": {block.description}" if block.description else ""
        return [TextPart(f"[resource link: {block.name} <{block.uri}>{kind}{about}]")]
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        kind = f", {resource.mime_type}" if resource.mime_type else ""
        if isinstance(resource, mcp_types.TextResourceContents):
            return [TextPart(f"[resource <{resource.uri}>{kind}]\n{resource.text}")]
        return [TextPart(f"[resource <{resource.uri}>{kind}, {_size(resource.blob)}]")]
    kind = getattr(block, "type", type(block).__name__)
    return [TextPart(f"[content of type {kind!r} left out]")]


def _carries(parts: Sequence[ContentPart], value: Any) -> bool:
    """Whether the text parts already carry ``value``: one is its JSON, or it is an object of texts all present."""
    texts = [part.text for part in parts if isinstance(part, TextPart)]
    for text in texts:
        try:
            if json.loads(text) == value:
                return True
        except ValueError:
            continue
    if isinstance(value, dict) and value and all(isinstance(item, str) for item in value.values()):
        joined = "\n".join(texts)
        return all(item in joined for item in value.values())
    return False


def result_parts(result: mcp_types.CallToolResult) -> tuple[ContentPart, ...]:
    """The parts of a tool result, in the server's order, structured content last when no text carries it."""
    parts: list[ContentPart] = []
    for block in result.content:
        parts.extend(_block_parts(block))
    structured = result.structured_content
    if structured is not None and not _carries(parts, structured):
        parts.append(TextPart(json.dumps(structured, ensure_ascii=False, sort_keys=True)))
    return tuple(parts)


def as_text(parts: Sequence[ContentPart], limit: int = MAX_RESULT_CHARS) -> str:
    """The parts as one text, one block a line (images described), cut to ``limit`` characters, saying so."""
    return describe_parts(as_content(parts, limit))


def as_content(parts: Sequence[ContentPart], limit: int = MAX_RESULT_CHARS) -> tuple[ContentPart, ...]:
    """The parts of a tool result's content: one block a line, the text cut to ``limit`` characters, saying so.

    Images stay parts (``tool_content`` then bounds them); only text counts
    against ``limit``.
    """
    found: list[ContentPart] = []
    used = 0
    total = sum(len(part.text) for part in parts if isinstance(part, TextPart))
    for index, part in enumerate(parts):
        separator = "\n" if index else ""
        if isinstance(part, ImagePart):
            if separator:
                found.append(TextPart(separator))
            found.append(part)
            continue
        room = limit - used
        if room <= 0:
            continue
        text = part.text[:room]
        used += len(text)
        found.append(TextPart(separator + text))
    if total > limit:
        found.append(TextPart(f"\n[cut: the result has {total} characters of text; the first {limit} are shown]"))
    return tuple(found)


def tool_result(result: mcp_types.CallToolResult, limit: int = MAX_RESULT_CHARS) -> ToolResult:
    """The ToolResult of an MCP tool result: text, or text and images; failed when the server says so."""
    parts = as_content(result_parts(result), limit)
    status = "failed" if result.is_error else "succeeded"
    if any(isinstance(part, ImagePart) for part in parts):
        return ToolResult(parts, status)
    return ToolResult("".join(part.text for part in parts if isinstance(part, TextPart)), status)

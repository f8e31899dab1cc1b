"""Request bodies: size-capped JSON objects, and the shapes the routes accept."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from orchestrator.config import ExternalEvent
from orchestrator.messages import UserMessage
from orchestrator.server.errors import HTTPRefusal, bad_request

DEFAULT_MAX_BODY_BYTES = 1_048_576


async def read_object(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object, refused (413) past ``limit`` bytes and (400) when not an object."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise bad_request("Content-Length must be a whole number")
        if int(declared) > limit:
            raise HTTPRefusal(413, "PayloadTooLarge", f"the body is over the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPRefusal(413, "PayloadTooLarge", f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise bad_request("the body must be a JSON object")
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as error:
        raise bad_request(f"the body is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise bad_request(f"the body must be a JSON object, not {type(value).__name__}")
    return value


def _optional_id(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise bad_request(f"{field!r} must be a non-empty string of at most 200 characters")
    return value


def run_input(body: Mapping[str, Any]) -> tuple[UserMessage, str | None]:
    """``{"input": "text" | [content parts], "request_id"?: str}``."""
    from orchestrator.wire.format import decode_message

    unknown = set(body) - {"input", "request_id"}
    if unknown:
        raise bad_request(f"unknown fields: {sorted(unknown)}")
    value = body.get("input")
    if isinstance(value, str):
        if not value.strip():
            raise bad_request("'input' must not be blank")
        message = UserMessage(value)
    elif isinstance(value, list) and value:
        try:
            decoded = decode_message({"role": "user", "content": value})
        except (TypeError, ValueError, KeyError) as error:
            raise bad_request(f"'input' is not a list of content parts: {error}") from None
        if not isinstance(decoded, UserMessage):
            raise bad_request("'input' must be user content")
        message = decoded
    else:
        raise bad_request("'input' must be a non-empty string or a non-empty list of content parts")
    return message, _optional_id(body, "request_id")


def external_event(body: Mapping[str, Any]) -> tuple[ExternalEvent, str | None]:
    """``{"name": str, "payload": object, "request_id"?: str}``."""
    unknown = set(body) - {"name", "payload", "request_id"}
    if unknown:
        raise bad_request(f"unknown fields: {sorted(unknown)}")
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise bad_request("'name' must be a non-empty string")
    payload = body.get("payload", {})
    if not isinstance(payload, dict):
        raise bad_request("'payload' must be a JSON object")
    return ExternalEvent(name, payload), _optional_id(body, "request_id")

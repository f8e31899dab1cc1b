"""Request bodies: size-capped JSON objects of bounded nesting, and the shapes the routes accept."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from orchestrator.config import ExternalEvent
from orchestrator.limits import UsageLimits
from orchestrator.messages import UserMessage
from orchestrator.server.errors import HTTPRefusal, bad_request
from orchestrator.server.ids import checked_id

DEFAULT_MAX_BODY_BYTES = 1_048_576
MAX_JSON_DEPTH = 100
"""Arrays and objects a body may nest: deeper bodies are refused before anything walks them."""
MAX_WHOLE_NUMBER_DIGITS = 18


def whole_number(raw: str, what: str) -> int:
    """``raw`` (blanks around it ignored) as a non-negative whole number of ASCII digits; a 400 otherwise.

    ``str.isdigit`` alone is not the test: it holds for digits ``int`` refuses, such as ``"\u00b2"``."""
    text = raw.strip()
    if not text or len(text) > MAX_WHOLE_NUMBER_DIGITS or not (text.isascii() and text.isdigit()):
        raise bad_request(f"{what} must be a non-negative whole number of at most {MAX_WHOLE_NUMBER_DIGITS} digits")
    return int(text)


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (a scalar is 0), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def decode_json(raw: bytes) -> Any:
    """The JSON value of a body; a 400 for anything that is not JSON, or nests past ``MAX_JSON_DEPTH``."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise bad_request(f"the body nests arrays or objects deeper than {MAX_JSON_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise bad_request(f"the body is not valid JSON: {error}") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise bad_request(f"the body nests arrays or objects deeper than {MAX_JSON_DEPTH} levels")
    return value


JSON_MEDIA_TYPE = "application/json"


def require_json(request: Request) -> None:
    """Refuse (415) a body not declared ``application/json`` (parameters such as charset aside).

    Only the CORS-safelisted types (text/plain, forms) can be posted by another
    site's page without a preflight, so none of them is read as a request.
    """
    declared = request.headers.get("content-type")
    media_type = (declared or "").partition(";")[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        shown = repr(declared) if declared is not None else "none"
        raise HTTPRefusal(
            415, "UnsupportedMediaType", f"the body must be sent as Content-Type: {JSON_MEDIA_TYPE} (got {shown})"
        )


async def read_object(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object: refused (415) unless declared JSON, (413) past ``limit`` bytes, (400) otherwise."""
    require_json(request)
    declared = request.headers.get("content-length")
    if declared is not None and whole_number(declared, "Content-Length") > limit:
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
    value = decode_json(raw)
    if not isinstance(value, dict):
        raise bad_request(f"the body must be a JSON object, not {type(value).__name__}")
    return value


def _optional_id(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    return checked_id(value, repr(field))


def run_bounds(body: Mapping[str, Any]) -> tuple[UsageLimits | None, float | None]:
    """A run's ``"limits"`` (``UsageLimits`` as a JSON object) and ``"deadline"`` (seconds), each optional;
    a 400 saying which value is wrong."""
    from orchestrator.checks import number
    from orchestrator.limits import usage_limits_from_json

    limits = body.get("limits")
    try:
        usage_limits = None if limits is None else usage_limits_from_json(limits)
    except (TypeError, ValueError) as error:
        raise bad_request(f"'limits': {error}") from None
    deadline = body.get("deadline")
    try:
        number(above=0, optional=True).check("'deadline' (seconds)", deadline)
    except (TypeError, ValueError) as error:
        raise bad_request(str(error)) from None
    return usage_limits, None if deadline is None else float(deadline)


def run_input(body: Mapping[str, Any]) -> tuple[UserMessage, str | None]:
    """``{"input": "text" | [content parts], "request_id"?: str, "limits"?: object, "deadline"?: number}``
    (the bounds are read by ``run_bounds``)."""
    from orchestrator.wire.format import decode_message

    unknown = set(body) - {"input", "request_id", "limits", "deadline"}
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
    name = checked_id(body.get("name"), "'name'")
    payload = body.get("payload", {})
    if not isinstance(payload, dict):
        raise bad_request("'payload' must be a JSON object")
    if "tool_call_id" in payload:
        checked_id(payload["tool_call_id"], "'payload.tool_call_id'")
    return ExternalEvent(name, payload), _optional_id(body, "request_id")


MAX_TURN = 10**9


def fork_input(body: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """``{"turn"?: int >= 1, "session_id"?: str}``: the turn to fork after (all when absent) and the new id."""
    unknown = set(body) - {"turn", "session_id"}
    if unknown:
        raise bad_request(f"unknown fields: {sorted(unknown)}")
    turn = body.get("turn")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= MAX_TURN):
        raise bad_request(f"'turn' must be a whole number from 1 to {MAX_TURN}")
    return turn, _optional_id(body, "session_id")


def title_input(body: Mapping[str, Any]) -> str:
    """``{"title": str}``: a title that is not blank, has no control characters and at most 200 characters."""
    unknown = set(body) - {"title"}
    if unknown:
        raise bad_request(f"unknown fields: {sorted(unknown)}")
    return checked_id(body.get("title"), "'title'")

"""Typed provider errors, and the mapping from an HTTP error response to them."""

from __future__ import annotations

import email.utils
import json
import math
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from orchestrator.errors import ModelError
from orchestrator.text import clean_text

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "MalformedStreamError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeoutError",
    "RateLimitError",
    "ServerError",
    "error_from_response",
    "error_from_type",
    "shown_url",
]


class ProviderError(ModelError):
    """A model provider refused or broke a request.

    ``status`` is the HTTP status (None for errors seen inside a stream or on
    the connection); ``body`` is the raw error body when there was one.
    ``retryable`` says whether trying again may succeed; ``retry_after`` is the
    server's wait hint in seconds (``retry-after`` or ``retry-after-ms``), on
    any status that sent one. ``url`` is the URL called, as ``shown_url`` shows
    it (no user info, query values hidden), when the error came from a call.
    """

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retry_after = retry_after
        self.url = url


class AuthenticationError(ProviderError):
    """The key is missing, wrong, or not allowed to use this model (401/403)."""


class RateLimitError(ProviderError):
    """Too many requests (429); ``retry_after`` is the server's wait hint in seconds."""

    retryable = True


class BadRequestError(ProviderError):
    """The provider rejected the request itself (other 4xx); retrying will not help."""


class ServerError(ProviderError):
    """The provider failed or is overloaded (5xx, 529, 408)."""

    retryable = True


class ProviderConnectionError(ProviderError):
    """The connection failed or dropped before a response came."""

    retryable = True


class ProviderTimeoutError(ProviderError):
    """Connecting or waiting for data took longer than the model's ``timeout``, no first
    event arrived within the retry policy's ``total_timeout`` (which ends the retries), or
    a started stream sent nothing but keepalives for the model's ``idle_timeout``."""

    retryable = True


class MalformedStreamError(ProviderError):
    """The event stream broke off, could not be decoded, or carried data that breaks the
    provider's protocol (a field of the wrong type, events out of order, a line over the limit)."""

    retryable = True


_SHOWN_QUERY_NAMES = frozenset({"alt", "api-version"})
"""Query parameters whose values an error shows (they say how, never who)."""


def shown_url(url: str) -> str:
    """``url`` as an error may show it: without user info (``user:password@``) or fragment, and with the
    value of every query parameter but ``_SHOWN_QUERY_NAMES`` replaced by ``***`` (a key may be there)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    shown = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else f"{netloc}{parts.path}"
    if not parts.query:
        return clean_text(shown)
    query = []
    for piece in parts.query.split("&"):
        name, equals, _ = piece.partition("=")
        query.append(piece if not equals or name in _SHOWN_QUERY_NAMES else f"{name}=***")
    return clean_text(f"{shown}?{'&'.join(query)}")


def _seconds(text: str, scale: float = 1.0) -> float | None:
    """A finite, non-negative number of seconds, or None when ``text`` is not one."""
    try:
        value = float(text) * scale
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None


def _parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date);
    a value that is not a finite number of seconds or a date is ignored."""
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None and (seconds := _seconds(millis, 1 / 1000)) is not None:
        return seconds
    value = lowered.get("retry-after")
    if value is None:
        return None
    if (seconds := _seconds(value)) is not None:
        return seconds
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


def _error_details(body: str) -> tuple[str | None, str | None]:
    """(type, message) from an OpenAI-, Anthropic- or Gemini-style JSON error body."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(parsed, dict):
        return None, None
    error = parsed.get("error", parsed)
    if isinstance(error, str):
        return None, error
    if not isinstance(error, dict):
        return None, None
    kind = error.get("type") or error.get("status") or error.get("code")  # status: Gemini's RESOURCE_EXHAUSTED
    message = error.get("message")
    return (str(kind) if kind is not None else None), (str(message) if message is not None else None)


_TYPE_CLASSES: dict[str, type[ProviderError]] = {
    "authentication_error": AuthenticationError,
    "permission_error": AuthenticationError,
    "invalid_api_key": AuthenticationError,
    "rate_limit_error": RateLimitError,
    "rate_limit_exceeded": RateLimitError,
    "overloaded_error": ServerError,
    "api_error": ServerError,
    "server_error": ServerError,
    "invalid_request_error": BadRequestError,
    "not_found_error": BadRequestError,
    "request_too_large": BadRequestError,
}


def error_from_type(kind: str | None, message: str, *, body: str | None = None) -> ProviderError:
    """The error for an ``error`` object that arrived inside an event stream."""
    cls = _TYPE_CLASSES.get(kind or "", ServerError)
    text = f"{kind}: {message}" if kind else message
    return cls(clean_text(text), body=None if body is None else clean_text(body))


def error_from_response(
    status: int, body: str, headers: Mapping[str, str], url: str | None = None
) -> ProviderError:
    """Map an HTTP error response to the matching ProviderError (its text cleaned, so it
    always encodes as UTF-8); ``url``, the URL called, is named in its message (as ``shown_url``)."""
    body = clean_text(body)
    kind, detail = _error_details(body)
    text = f"HTTP {status}"
    if kind:
        text += f" {kind}"
    text = clean_text(text + f": {detail or body.strip()[:500] or 'no body'}")
    shown = None if url is None else shown_url(url)
    if shown is not None:
        text += f" (POST {shown})"
    cls: type[ProviderError]
    if status in (401, 403):
        cls = AuthenticationError
    elif status == 429:
        cls = RateLimitError
    elif status >= 500 or status == 408:
        cls = ServerError
    else:
        cls = BadRequestError
    return cls(text, status=status, body=body, retry_after=_parse_retry_after(headers), url=shown)

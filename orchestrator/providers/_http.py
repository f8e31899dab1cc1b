"""The HTTP part shared by the providers: one streamed POST, its errors mapped."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from orchestrator.providers.errors import (
    MalformedStreamError,
    ProviderConnectionError,
    ProviderTimeoutError,
    error_from_response,
    shown_url,
)
from orchestrator.providers.sse import MAX_SSE_LINE_BYTES, ServerSentEvent, parse_sse, split_lines
from orchestrator.text import clean_json, clean_text

T = TypeVar("T")

#: How much of an error response's body is read (the rest is dropped): 64 KiB.
MAX_ERROR_BODY_BYTES = 64 * 1024

if TYPE_CHECKING:
    import httpx


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as missing:  # pragma: no cover - depends on the installation
        raise ImportError("the providers need httpx: pip install 'orchestrator[providers]'") from missing
    return httpx


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as UTF-8 JSON; text that cannot be encoded (a lone surrogate in the
    history) is cleaned here, so building a request never fails on it."""
    return clean_text(json.dumps(dict(body), ensure_ascii=False, separators=(",", ":"))).encode("utf-8")


async def _read_bounded(response: httpx.Response, limit: int) -> str:
    """At most ``limit`` bytes of the body, decoded (invalid bytes replaced)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk[: limit - size])
        size += len(parts[-1])
        if size >= limit:
            break
    return b"".join(parts).decode("utf-8", errors="replace")


async def post_sse(
    client: httpx.AsyncClient | None,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    timeout: float,
    max_line_bytes: int = MAX_SSE_LINE_BYTES,
) -> AsyncGenerator[ServerSentEvent, None]:
    """POST ``body`` as JSON and yield the response's server-sent events.

    An error status raises the matching ProviderError; a connect, read,
    write or pool timeout raises ProviderTimeoutError, a body that cannot be
    decoded (bad gzip) or a line over ``max_line_bytes`` MalformedStreamError,
    other transport failures ProviderConnectionError. A client made here is
    closed here.
    """
    lib = _httpx()
    owned = client is None
    active: httpx.AsyncClient = lib.AsyncClient(timeout=timeout) if client is None else client
    sent = {"content-type": "application/json", **headers}
    shown = shown_url(url)
    try:
        async with active.stream("POST", url, content=encode_body(body), headers=sent, timeout=timeout) as response:
            if response.status_code >= 400:
                text = await _read_bounded(response, MAX_ERROR_BODY_BYTES)
                raise error_from_response(response.status_code, text, response.headers, url)
            if response.headers.get("content-type", "").startswith("application/json"):
                preview = (await _read_bounded(response, MAX_ERROR_BODY_BYTES))[:300]
                raise MalformedStreamError(f"expected an event stream from {shown}, got JSON: {preview}", url=shown)
            lines = split_lines(response.aiter_bytes(), max_line_bytes)
            async for event in parse_sse(lines, max_line_bytes):
                yield event
    except lib.TimeoutException as error:
        raise ProviderTimeoutError(f"timed out talking to {shown}: {type(error).__name__}", url=shown) from error
    except lib.DecodingError as error:
        raise MalformedStreamError(f"the response from {shown} could not be decoded: {error}", url=shown) from error
    except lib.TransportError as error:
        failure = f"connection to {shown} failed: {type(error).__name__}: {error}"
        raise ProviderConnectionError(failure, url=shown) from error
    except lib.RequestError as error:
        failure = f"request to {shown} failed: {type(error).__name__}: {error}"
        raise ProviderConnectionError(failure, url=shown) from error
    finally:
        if owned:
            with trio.CancelScope(shield=True):
                await active.aclose()


class IdleTimer:
    """Bounds the wait for a stream's next event once its first event has come.

    ``next`` waits without this bound until the first event; from then on,
    ``idle_timeout`` seconds after the last ``reset`` (the adapters reset on
    every content-bearing event, not on keepalives) it raises
    ProviderTimeoutError. None disables the bound.
    """

    def __init__(self, idle_timeout: float | None, url: str) -> None:
        self.idle_timeout = idle_timeout
        self.url = shown_url(url)
        self.deadline: float | None = None

    def reset(self) -> None:
        """Content arrived: the stream has ``idle_timeout`` seconds again."""
        if self.idle_timeout is not None:
            self.deadline = trio.current_time() + self.idle_timeout

    async def next(self, items: AsyncIterator[T]) -> T | None:
        """The next item, None at the end."""
        if self.deadline is None:
            try:
                item = await items.__anext__()
            except StopAsyncIteration:
                return None
            self.reset()
            return item
        with trio.move_on_at(self.deadline):
            try:
                return await items.__anext__()
            except StopAsyncIteration:
                return None
        raise ProviderTimeoutError(
            f"no content from {self.url} for {self.idle_timeout}s (idle_timeout; keepalives do not count)", url=self.url
        )


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments from their JSON text, for ``ToolCall(id, name, *parse_arguments(raw))``.

    Text that is not a JSON object gives no arguments and the (cleaned) text
    itself, which becomes ``ToolCall.invalid_arguments``.
    """
    raw = clean_text(raw)
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {}, raw
    return (clean_json(value), None) if isinstance(value, dict) else ({}, raw)

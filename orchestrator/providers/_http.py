"""The HTTP part shared by the providers: one streamed POST, its errors mapped."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any

import trio

from orchestrator.providers.errors import (
    MalformedStreamError,
    ProviderConnectionError,
    ProviderTimeoutError,
    error_from_response,
)
from orchestrator.providers.sse import ServerSentEvent, parse_sse

if TYPE_CHECKING:
    import httpx


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as missing:  # pragma: no cover - depends on the installation
        raise ImportError("the providers need httpx: pip install 'orchestrator[providers]'") from missing
    return httpx


async def post_sse(
    client: httpx.AsyncClient | None,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    timeout: float,
) -> AsyncGenerator[ServerSentEvent, None]:
    """POST ``body`` as JSON and yield the response's server-sent events.

    An error status raises the matching ProviderError; a connect, read,
    write or pool timeout raises ProviderTimeoutError, other transport
    failures ProviderConnectionError. A client made here is closed here.
    """
    lib = _httpx()
    owned = client is None
    active: httpx.AsyncClient = lib.AsyncClient(timeout=timeout) if client is None else client
    try:
        async with active.stream("POST", url, json=dict(body), headers=dict(headers), timeout=timeout) as response:
            if response.status_code >= 400:
                raw = await response.aread()
                text = raw.decode("utf-8", errors="replace")
                raise error_from_response(response.status_code, text, response.headers)
            if response.headers.get("content-type", "").startswith("application/json"):
                raw = await response.aread()
                preview = raw.decode("utf-8", errors="replace")[:300]
                raise MalformedStreamError(f"expected an event stream from {url}, got JSON: {preview}")
            async for event in parse_sse(response.aiter_lines()):
                yield event
    except lib.TimeoutException as error:
        raise ProviderTimeoutError(f"timed out talking to {url}: {type(error).__name__}") from error
    except lib.TransportError as error:
        raise ProviderConnectionError(f"connection to {url} failed: {type(error).__name__}: {error}") from error
    finally:
        if owned:
            with trio.CancelScope(shield=True):
                await active.aclose()


def decode(event: ServerSentEvent) -> dict[str, Any]:
    """The JSON object in an event's data."""
    try:
        value = json.loads(event.data)
    except ValueError as error:
        raise MalformedStreamError(f"event data is not JSON: {event.data[:200]!r}") from error
    if not isinstance(value, dict):
        raise MalformedStreamError(f"event data is not a JSON object: {event.data[:200]!r}")
    return value


MALFORMED = "__malformed_arguments__"


def parse_arguments(raw: str) -> dict[str, Any]:
    """Tool-call arguments from their JSON text; ``{MALFORMED: raw}`` when not a JSON object."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {MALFORMED: raw}
    return value if isinstance(value, dict) else {MALFORMED: raw}

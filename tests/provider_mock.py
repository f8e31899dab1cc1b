"""A scripted HTTP server on httpx.MockTransport for the provider tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from orchestrator.model import ModelEvent, ModelRequest


class BrokenStream(httpx.AsyncByteStream):
    """A body that sends some bytes, then loses the connection."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        raise httpx.ReadError("connection reset by peer")


def sse(body: str, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status, headers={"content-type": "text/event-stream", **(headers or {})}, content=body.encode()
    )


def error(status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, headers=headers or {}, json=payload)


class Server:
    """Answers each request with the next scripted response and records it."""

    def __init__(self, *responses: httpx.Response) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.responses:
            raise AssertionError(f"unexpected request {len(self.requests)} to {request.url}")
        return self.responses.pop(0)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle))

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]


class Sleeps:
    """An injected sleep that records the delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


async def collect(model: Any, request: ModelRequest) -> list[ModelEvent]:
    return [event async for event in model.stream(request)]

"""Every adapter retries the same statuses the same way: after ``retry-after`` when the server sent
one, with growing backoff when not, and a typed error once ``max_retries`` is spent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from provider_mock import Server, Sleeps, collect, error, sse

from orchestrator import UserMessage
from orchestrator.model import ModelRequest, ResponseCompletedEvent
from orchestrator.providers import (
    AnthropicModel,
    GeminiModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ProviderError,
    RateLimitError,
    RetryPolicy,
    ServerError,
)
from orchestrator.providers.base import HTTPStreamingModel

RECORDED = Path(__file__).parent / "fixtures" / "providers"
TEXT = {
    "openai": "openai_text.sse",
    "anthropic": "anthropic_text.sse",
    "responses": "openai_responses_text.sse",
    "gemini": "gemini_text.sse",
}
HELLO = ModelRequest([UserMessage("Say hello")])
POLICY = RetryPolicy(max_retries=2, initial_delay=0.5, multiplier=2.0, jitter=0.25)


def model(adapter: str, server: Server, sleeps: Sleeps) -> HTTPStreamingModel:
    options: dict[str, Any] = {"api_key": "k", "client": server.client(), "sleep": sleeps, "retry": POLICY}
    if adapter == "openai":
        return OpenAIChatModel("gpt-4o-mini", **options)
    if adapter == "responses":
        return OpenAIResponsesModel("gpt-5-mini", **options)
    if adapter == "gemini":
        return GeminiModel("gemini-2.5-flash", **options)
    return AnthropicModel("claude-sonnet-4-5", **options)


def failure(status: int, headers: dict[str, str] | None = None) -> Any:
    return error(status, {"error": {"type": "overloaded", "message": f"status {status}"}}, headers)


@pytest.mark.parametrize("adapter", list(TEXT))
@pytest.mark.parametrize("status", [429, 500, 503, 529])
async def test_without_retry_after_each_retry_waits_longer(adapter: str, status: int) -> None:
    text = (RECORDED / TEXT[adapter]).read_text()
    server = Server(failure(status), failure(status), sse(text))
    sleeps = Sleeps()
    events = await collect(model(adapter, server, sleeps), HELLO)
    assert isinstance(events[-1], ResponseCompletedEvent)
    first, second = sleeps.delays
    assert 0.5 <= first <= 0.5 * 1.25 and 1.0 <= second <= 1.0 * 1.25
    assert len(server.requests) == 3


@pytest.mark.parametrize("adapter", list(TEXT))
@pytest.mark.parametrize("status", [429, 500, 503, 529])
@pytest.mark.parametrize(("header", "value", "seconds"), [("retry-after", "7", 7.0), ("retry-after-ms", "250", 0.25)])
async def test_with_retry_after_the_retry_waits_what_the_server_asked(
    adapter: str, status: int, header: str, value: str, seconds: float
) -> None:
    text = (RECORDED / TEXT[adapter]).read_text()
    server = Server(failure(status, {header: value}), sse(text))
    sleeps = Sleeps()
    await collect(model(adapter, server, sleeps), HELLO)
    assert sleeps.delays == [seconds]


@pytest.mark.parametrize("adapter", list(TEXT))
@pytest.mark.parametrize(("status", "expected"), [(429, RateLimitError), (503, ServerError), (529, ServerError)])
async def test_a_status_that_stays_is_typed_after_max_retries(
    adapter: str, status: int, expected: type[ProviderError]
) -> None:
    server = Server(failure(status), failure(status), failure(status))
    sleeps = Sleeps()
    with pytest.raises(expected) as raised:
        await collect(model(adapter, server, sleeps), HELLO)
    assert raised.value.status == status and raised.value.retry_after is None
    assert len(sleeps.delays) == 2 and len(server.requests) == 3

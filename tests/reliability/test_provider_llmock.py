"""Both adapters against LLMock, a real HTTP server on loopback that fails on demand.

LLMock (from PyPI) speaks the Chat Completions and Messages protocols and
injects faults: error statuses with ``retry-after``, streams cut, corrupted,
dropped or stalled part way. Each fault must end in a typed ModelError (or a
retry that honours the server's wait), never a raw error or a hang.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio

llmock_testing = pytest.importorskip(
    "llmock.testing", reason="llmock is not installed (pip install -e '.[test]'): hostile-server tests not run"
)
from llmock.pytest_plugin import LLMock  # noqa: E402

from orchestrator.errors import ModelError  # noqa: E402
from orchestrator.messages import UserMessage  # noqa: E402
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent, TextDeltaEvent  # noqa: E402
from orchestrator.providers import (  # noqa: E402
    AnthropicModel,
    MalformedStreamError,
    OpenAIChatModel,
    ProviderConnectionError,
    ProviderTimeoutError,
    RetryPolicy,
)
from orchestrator.tools import tool  # noqa: E402

ADAPTERS = ["openai", "anthropic"]
REQUEST = ModelRequest([UserMessage("Write a long answer about the weather in Paris, please.")])


@tool
def get_weather(city: str) -> str:
    """Current weather of a city.

    Args:
        city: the city name
    """
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with llmock_testing.LLMockServer() as running:
        yield running


@pytest.fixture
def mock(server: Any) -> LLMock:
    return LLMock(server).reset()


def model(mock: LLMock, adapter: str, **options: Any) -> OpenAIChatModel | AnthropicModel:
    options.setdefault("retry", RetryPolicy(max_retries=2, initial_delay=0.05, total_timeout=30))
    options.setdefault("timeout", 20.0)
    if adapter == "openai":
        return OpenAIChatModel("gpt-4o-mini", api_key="k", base_url=mock.base_url("openai"), **options)
    return AnthropicModel("claude-sonnet-4-5", api_key="k", base_url=mock.base_url("anthropic"), **options)


async def run(chosen: OpenAIChatModel | AnthropicModel, request: ModelRequest = REQUEST) -> list[ModelEvent]:
    with trio.fail_after(30):
        return [event async for event in chosen.stream(request)]


def whole(events: list[ModelEvent]) -> ResponseCompletedEvent:
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    assert "".join(e.text for e in events if isinstance(e, TextDeltaEvent)) == last.message.content
    return last


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_plain_answer_streams_whole(mock: LLMock, adapter: str) -> None:
    mock.reply("Sunny and mild in Paris today.", provider=adapter)
    assert whole(await run(model(mock, adapter))).message.content == "Sunny and mild in Paris today."


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("status", [429, 503, 529, 500])
async def test_retry_after_is_honoured_on_every_retried_status(mock: LLMock, adapter: str, status: int) -> None:
    mock.fail(status, times=1, retry_after=0.3, provider=adapter)
    whole(await run(model(mock, adapter)))
    first, second = mock.requests[:2]
    assert second.started_at - first.started_at >= 0.3
    mock.assert_resilient()


NO_RETRY = RetryPolicy(max_retries=0)
FAULTS = {
    "truncate": (LLMock.truncate, MalformedStreamError),
    "corrupt": (LLMock.corrupt, MalformedStreamError),
    "disconnect": (LLMock.disconnect, (ProviderConnectionError, MalformedStreamError)),
}


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("after_chunks", [1, 3, 5])
async def test_a_broken_stream_is_a_typed_error(mock: LLMock, adapter: str, fault: str, after_chunks: int) -> None:
    inject, expected = FAULTS[fault]
    inject(mock, after_chunks=after_chunks, provider=adapter)
    with pytest.raises(expected):
        await run(model(mock, adapter, retry=NO_RETRY))


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("fault", FAULTS)
async def test_a_stream_broken_before_any_content_is_retried(mock: LLMock, adapter: str, fault: str) -> None:
    FAULTS[fault][0](mock, after_chunks=1, provider=adapter)
    whole(await run(model(mock, adapter)))
    assert len(mock.requests) == 2
    mock.assert_resilient()


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_stalled_stream_ends_at_the_idle_timeout(mock: LLMock, adapter: str) -> None:
    mock.stall(after_chunks=3, seconds=60, provider=adapter)
    began = trio.current_time()
    with pytest.raises(ProviderTimeoutError):
        await run(model(mock, adapter, idle_timeout=1.0, retry=NO_RETRY))
    assert trio.current_time() - began < 30


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_tool_calls_and_broken_arguments_come_back_well_formed(mock: LLMock, adapter: str) -> None:
    request = ModelRequest([UserMessage("weather in Paris?")], [get_weather])
    mock.call_tool("get_weather", {"city": "Paris"}, provider=adapter)
    [call] = whole(await run(model(mock, adapter), request)).message.tool_calls
    assert call.name == "get_weather" and call.arguments == {"city": "Paris"}
    assert isinstance(call.id, str) and call.id
    mock.break_tool_call("malformed_arguments")
    try:
        events = await run(model(mock, adapter), request)
    except ModelError:
        return
    for broken in whole(events).message.tool_calls:
        assert isinstance(broken.id, str) and broken.id


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_shared_client_still_works_after_an_idle_timeout(mock: LLMock, adapter: str) -> None:
    import httpx

    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=1)) as client:
        chosen = model(mock, adapter, idle_timeout=1.0, retry=NO_RETRY, client=client)
        mock.stall(after_chunks=3, seconds=60, provider=adapter)
        with pytest.raises(ProviderTimeoutError):
            await run(chosen)
        mock.reply("Back again.", provider=adapter)
        assert whole(await run(chosen)).message.content == "Back again."

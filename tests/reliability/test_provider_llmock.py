"""Every adapter against LLMock, a real HTTP server on loopback that fails on demand and judges the client.

LLMock (from PyPI) serves all four protocols the adapters speak: Chat Completions
(``/v1/chat/completions``), the Responses API (``/v1/responses``), Anthropic Messages
(``/anthropic/v1/messages``) and Gemini ``streamGenerateContent?alt=sse``
(``/gemini/v1beta/...``). It injects faults: error statuses with and without
``retry-after``, streams dropped, cut short, corrupted or stalled at a chosen chunk, a
slow first chunk, broken tool calls. It keeps a journal of every attempt and gives a
resilience verdict (``LLMock.verdict()``, from ``llmock.verdict.judge``): findings such
as ``retry_after_ignored``, ``retried_non_retryable``, ``retry_storm``,
``truncated_stream_accepted``, ``malformed_chunk_ignored``, ``no_backoff``, ``gave_up``
and ``no_read_timeout``. Each test below ends in the documented outcome and then asserts
the verdict has no finding at all (``assert_resilient(strict=True)``: warnings fail too).

The documented outcomes:

- a retryable status (429, 500, 502, 503, 529) is retried, after the server's
  ``retry-after`` when it sent one and with growing backoff when not; LLMock itself
  adds ``retry-after: 1`` to 429, 503, 504 and 529 when a test scripts none (that wait is
  honoured too), so the statuses it sends bare are 500 and 502; tests/test_providers_retry.py
  covers 429, 503 and 529 without the header, on a mock transport. A status that stays is a typed error after
  ``max_retries``; 400 and 401 are typed errors at once.
- a stream broken before its first event (dropped, cut, corrupted, stalled past the read
  timeout, or a first chunk slower than it) is retried by the adapter.
- a stream broken after its first event is a typed, retryable ``ModelError``
  (``MalformedStreamError``, ``ProviderConnectionError``, ``ProviderTimeoutError``): the
  adapter does not retry it, since the application already has the text. The verdict
  only sees the server's side, so it would count a cut stream nobody asked for again as
  accepted; the tests play the application, which calls once more because the error
  says ``retryable``, and the verdict is then clean.
- tool-call faults reach the runtime: malformed arguments and an unknown tool give a
  failed tool result (the tool does not run) and the model answers after reading it.
  Gemini sends arguments as an object, so LLMock turns its broken arguments into ``{}``:
  the call then fails for its missing argument.
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

from orchestrator import create_agent  # noqa: E402
from orchestrator.errors import ModelError  # noqa: E402
from orchestrator.events import ToolCompletedEvent, ToolFailedEvent  # noqa: E402
from orchestrator.messages import ToolStatus, UserMessage  # noqa: E402
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent, TextDeltaEvent  # noqa: E402
from orchestrator.providers import (  # noqa: E402
    AnthropicModel,
    AuthenticationError,
    BadRequestError,
    GeminiModel,
    MalformedStreamError,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitError,
    RetryPolicy,
    ServerError,
)
from orchestrator.providers.base import HTTPStreamingModel  # noqa: E402
from orchestrator.tools import tool  # noqa: E402

ADAPTERS = ["openai", "anthropic", "responses", "gemini"]
#: LLMock's name for the provider each adapter talks to (it tells the Responses API from
#: Chat Completions by path, not by provider).
PROVIDER = {"openai": "openai", "anthropic": "anthropic", "responses": "openai", "gemini": "gemini"}
#: How many chunks each protocol sends up to and including the first that streams text:
#: a fault at this chunk count or later comes after the first event, earlier ones before it.
FIRST_TEXT_CHUNK = {"openai": 2, "anthropic": 4, "responses": 5, "gemini": 1}
ANSWER = "One two three four five six seven eight nine ten."
REQUEST = ModelRequest([UserMessage("Write a long answer about the weather in Paris, please.")])
QUICK = RetryPolicy(max_retries=2, initial_delay=0.1, total_timeout=30)
NO_RETRY = RetryPolicy(max_retries=0)


@tool
def get_weather(city: str) -> str:
    """Current weather of a city.

    Args:
        city: the city name
    """
    WEATHER_ASKED.append(city)
    return f"sunny in {city}"


WEATHER_ASKED: list[str] = []


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with llmock_testing.LLMockServer() as running:
        yield running


@pytest.fixture
def mock(server: Any) -> LLMock:
    WEATHER_ASKED.clear()
    return LLMock(server).reset()


def model(mock: LLMock, adapter: str, **options: Any) -> HTTPStreamingModel:
    options.setdefault("retry", QUICK)
    options.setdefault("timeout", 20.0)
    if adapter == "openai":
        return OpenAIChatModel("gpt-4o-mini", api_key="k", base_url=mock.base_url("openai"), **options)
    if adapter == "responses":
        return OpenAIResponsesModel("gpt-5-mini", api_key="k", base_url=mock.base_url("openai"), **options)
    if adapter == "gemini":
        return GeminiModel("gemini-2.5-flash", api_key="k", base_url=mock.base_url("gemini"), **options)
    return AnthropicModel("claude-sonnet-4-5", api_key="k", base_url=mock.base_url("anthropic"), **options)


async def attempt(
    chosen: HTTPStreamingModel, request: ModelRequest = REQUEST
) -> tuple[list[ModelEvent], ModelError | None]:
    """The events of one call, and the ModelError that ended it (None when it completed)."""
    events: list[ModelEvent] = []
    with trio.fail_after(30):
        try:
            async for event in chosen.stream(request):
                events.append(event)
        except ModelError as error:
            return events, error
    return events, None


async def run(chosen: HTTPStreamingModel, request: ModelRequest = REQUEST) -> list[ModelEvent]:
    events, error = await attempt(chosen, request)
    if error is not None:
        raise error
    return events


def whole(events: list[ModelEvent], text: str | None = None) -> ResponseCompletedEvent:
    """The completed response, after checking the streamed text adds up to it."""
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    assert "".join(e.text for e in events if isinstance(e, TextDeltaEvent)) == last.message.content
    assert last.stop_reason == "end_turn"
    if text is not None:
        assert last.message.content == text
    return last


def clean(mock: LLMock) -> None:
    """LLMock's verdict on this test's traffic has no finding at all, warnings included."""
    mock.assert_resilient(strict=True)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_plain_answer_streams_whole(mock: LLMock, adapter: str) -> None:
    mock.reply(ANSWER, provider=PROVIDER[adapter])
    whole(await run(model(mock, adapter)), ANSWER)
    assert len(mock.requests) == 1
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("status", [429, 500, 503, 529])
async def test_retry_after_is_honoured_on_every_retried_status(mock: LLMock, adapter: str, status: int) -> None:
    mock.fail(status, times=1, retry_after=0.3, provider=PROVIDER[adapter]).reply(ANSWER)
    whole(await run(model(mock, adapter)), ANSWER)
    first, second = mock.requests
    assert first.status == status and first.retry_after == 0.3
    assert second.started_at - first.ended_at >= 0.3
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("status", [429, 503, 529])
async def test_statuses_scripted_without_retry_after_wait_for_llmocks_default(
    mock: LLMock, adapter: str, status: int
) -> None:
    mock.fail(status, times=1, provider=PROVIDER[adapter]).reply(ANSWER)
    whole(await run(model(mock, adapter)), ANSWER)
    first, second = mock.requests
    assert first.retry_after == 1.0  # what LLMock sends on these statuses when none is scripted
    assert second.started_at - first.ended_at >= 1.0
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("status", [500, 502])
async def test_statuses_without_retry_after_are_retried_with_growing_backoff(
    mock: LLMock, adapter: str, status: int
) -> None:
    mock.fail(status, times=2, provider=PROVIDER[adapter]).reply(ANSWER)
    growing = RetryPolicy(max_retries=2, initial_delay=0.1, multiplier=5.0, jitter=0.0, total_timeout=30)
    whole(await run(model(mock, adapter, retry=growing)), ANSWER)
    first, second, third = mock.requests
    assert first.retry_after is None and second.retry_after is None
    # Each wait lasts at least its delay (0.1 s, then 0.5 s); lower bounds hold on a busy machine too.
    assert second.started_at - first.ended_at >= 0.1
    assert third.started_at - second.ended_at >= 0.5
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize(("status", "expected"), [(500, ServerError), (429, RateLimitError)])
async def test_a_status_that_stays_is_a_typed_error_after_bounded_retries(
    mock: LLMock, adapter: str, status: int, expected: type[ProviderError]
) -> None:
    mock.fail(status, times=None, retry_after=0.1 if status == 429 else None, provider=PROVIDER[adapter])
    _, error = await attempt(model(mock, adapter))
    assert isinstance(error, expected) and error.status == status
    assert len(mock.requests) == 3  # the first attempt and max_retries=2
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize(("status", "expected"), [(400, BadRequestError), (401, AuthenticationError)])
async def test_a_client_error_is_typed_and_never_retried(
    mock: LLMock, adapter: str, status: int, expected: type[ProviderError]
) -> None:
    mock.fail(status, times=1, provider=PROVIDER[adapter])
    _, error = await attempt(model(mock, adapter))
    assert isinstance(error, expected) and not error.retryable
    assert len(mock.requests) == 1
    clean(mock)


BREAKS = {"disconnect": LLMock.disconnect, "truncate": LLMock.truncate, "corrupt": LLMock.corrupt}


def break_stream(mock: LLMock, fault: str, after: int, adapter: str) -> None:
    """Break the next stream. A corrupted chunk leaves the rest of the stream flowing: paced,
    the server is still sending when the client hangs up, so the journal shows the attempt
    as abandoned (on a fast loopback the whole body would be out before the client reads
    the bad chunk, and the verdict could not tell a client that stopped from one that read on)."""
    if fault == "corrupt":
        mock.pace(30)
    BREAKS[fault](mock, after_chunks=after, provider=PROVIDER[adapter])


#: What each break raises once the stream has started.
BROKEN_AFTER_START = {
    "disconnect": (ProviderConnectionError, MalformedStreamError),
    "truncate": MalformedStreamError,
    "corrupt": MalformedStreamError,
}


def before_first_text(adapter: str) -> list[int]:
    return sorted({0, FIRST_TEXT_CHUNK[adapter] - 1})


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("fault", BREAKS)
@pytest.mark.parametrize("early", [True, False], ids=["at-once", "last-chunk-before-text"])
async def test_a_stream_broken_before_its_first_event_is_retried_by_the_adapter(
    mock: LLMock, adapter: str, fault: str, early: bool
) -> None:
    after = before_first_text(adapter)[0 if early else -1]
    break_stream(mock, fault, after, adapter)
    mock.reply(ANSWER, times=2)
    whole(await run(model(mock, adapter)), ANSWER)
    broken, retried = mock.requests
    assert broken.fault == {"corrupt": "stream:malformed"}.get(fault, f"stream:{fault}") + f"@{after}"
    assert retried.fault is None
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("fault", BREAKS)
@pytest.mark.parametrize("later", [0, 3], ids=["right-after-first-text", "mid-answer"])
async def test_a_stream_broken_after_its_first_event_is_a_typed_error_the_application_retries(
    mock: LLMock, adapter: str, fault: str, later: int
) -> None:
    break_stream(mock, fault, FIRST_TEXT_CHUNK[adapter] + later, adapter)
    mock.reply(ANSWER, times=2)
    chosen = model(mock, adapter)
    events, error = await attempt(chosen)
    assert isinstance(error, BROKEN_AFTER_START[fault]) and error.retryable
    assert any(isinstance(e, TextDeltaEvent) for e in events), "the fault came after the first event"
    assert not any(isinstance(e, ResponseCompletedEvent) for e in events)
    assert len(mock.requests) == 1, "the adapter does not retry a stream that has started"
    whole(await run(chosen), ANSWER)  # the application calls again: the error said retryable
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_stall_before_the_first_byte_hits_the_read_timeout_and_is_retried(mock: LLMock, adapter: str) -> None:
    mock.stall(after_chunks=0, seconds=3, provider=PROVIDER[adapter]).reply(ANSWER, times=2)
    whole(await run(model(mock, adapter, timeout=1.0)), ANSWER)
    stalled, retried = mock.requests
    assert stalled.fault == "stream:stall@0" and retried.fault is None
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_stall_after_the_first_event_ends_at_the_idle_timeout(mock: LLMock, adapter: str) -> None:
    mock.stall(after_chunks=FIRST_TEXT_CHUNK[adapter] + 1, seconds=3, provider=PROVIDER[adapter])
    mock.reply(ANSWER, times=2)
    chosen = model(mock, adapter, idle_timeout=1.0)
    began = trio.current_time()
    events, error = await attempt(chosen)
    assert isinstance(error, ProviderTimeoutError) and "idle_timeout" in str(error)
    assert trio.current_time() - began < 2.9
    assert any(isinstance(e, TextDeltaEvent) for e in events)
    whole(await run(chosen), ANSWER)
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_slow_first_token_within_the_timeout_is_waited_for(mock: LLMock, adapter: str) -> None:
    mock.slow_first_token(0.5, provider=PROVIDER[adapter]).reply(ANSWER)
    began = trio.current_time()
    whole(await run(model(mock, adapter, timeout=5.0)), ANSWER)
    assert trio.current_time() - began >= 0.5
    assert len(mock.requests) == 1
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_first_token_slower_than_the_timeout_is_retried(mock: LLMock, adapter: str) -> None:
    mock.slow_first_token(3.0, provider=PROVIDER[adapter]).reply(ANSWER, times=2)
    whole(await run(model(mock, adapter, timeout=1.0)), ANSWER)
    assert len(mock.requests) == 2
    clean(mock)


async def run_agent(chosen: HTTPStreamingModel) -> list[Any]:
    agent = await create_agent(chosen, tools=[get_weather])
    with trio.fail_after(30):
        return [event async for event in agent.stream("What is the weather in Paris?")]


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_tool_call_runs_and_the_model_answers_after_its_result(mock: LLMock, adapter: str) -> None:
    mock.call_tool("get_weather", {"city": "Paris"}, provider=PROVIDER[adapter])
    events = await run_agent(model(mock, adapter))
    [done] = [e for e in events if isinstance(e, ToolCompletedEvent)]
    assert done.call.arguments == {"city": "Paris"} and done.result.content == "sunny in Paris"
    assert WEATHER_ASKED == ["Paris"]
    assert len(mock.requests) == 2
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("fault", ["malformed_arguments", "unknown_tool"])
async def test_a_broken_tool_call_gets_a_failed_result_and_the_model_goes_on(
    mock: LLMock, adapter: str, fault: str
) -> None:
    mock.break_tool_call(fault)
    events = await run_agent(model(mock, adapter))
    [failed] = [e for e in events if isinstance(e, ToolFailedEvent)]
    assert failed.result.status is ToolStatus.FAILED
    assert failed.result.tool_call_id == failed.call.id and failed.call.id
    if fault == "unknown_tool":
        assert failed.call.name == "llmock_unknown_tool"
        assert "llmock_unknown_tool" in failed.result.content
    elif adapter != "gemini":
        assert failed.call.invalid_arguments is not None
    assert WEATHER_ASKED == [], "a broken call does not run"
    assert not any(isinstance(e, ToolCompletedEvent) for e in events)
    second = mock.requests[1]
    assert second.status == 200 and second.completed, "the model was asked again, with the failed result"
    clean(mock)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_shared_client_still_works_after_an_idle_timeout(mock: LLMock, adapter: str) -> None:
    import httpx

    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=1)) as client:
        chosen = model(mock, adapter, idle_timeout=1.0, retry=NO_RETRY, client=client)
        mock.stall(after_chunks=FIRST_TEXT_CHUNK[adapter], seconds=3, provider=PROVIDER[adapter])
        mock.reply(ANSWER, times=2)
        with pytest.raises(ProviderTimeoutError):
            await run(chosen)
        whole(await run(chosen), ANSWER)

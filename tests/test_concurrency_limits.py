"""Concurrency limits: an agent's cap on model calls at once, and a provider's rate limit shared by its models;
past either a call waits, it never fails."""

from __future__ import annotations

import pytest
import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, create_agent
from orchestrator.config import AgentRunConfig
from orchestrator.messages import UserMessage
from orchestrator.providers import OpenAIChatModel, RateLimit
from tests.provider_mock import Server, collect, sse
from tests.test_providers_openai import text_stream


class Gauge:
    """How many model calls are in flight now, and the most ever seen."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def step(self, request: ModelRequest) -> AssistantMessage:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await trio.sleep(0.01)
        finally:
            self.now -= 1
        return AssistantMessage("done")


async def fifty_runs(cap: int | None) -> tuple[int, list[str]]:
    gauge = Gauge()
    client = await create_agent(ScriptedModel([gauge.step], repeat_last=True), max_concurrent_model_calls=cap)
    answers: list[str] = []

    async def one(index: int) -> None:
        answer = await client.run("go", config=AgentRunConfig(f"s{index}"))
        answers.append(str(answer.content))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for index in range(50):
                nursery.start_soon(one, index)
    return gauge.most, answers


async def test_fifty_runs_under_a_cap_of_five_model_calls_never_have_more_than_five_in_flight() -> None:
    most, answers = await fifty_runs(5)
    assert most == 5
    assert answers == ["done"] * 50  # none failed: each waited for a slot


async def test_without_a_cap_the_same_runs_call_the_model_more_than_five_at_once() -> None:
    most, _ = await fifty_runs(None)
    assert most > 5


async def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_concurrent_model_calls"):
        await create_agent(ScriptedModel([AssistantMessage("x")]), max_concurrent_model_calls=0)


class FakeTime:
    """A clock that moves only when the rate limit sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await trio.lowlevel.checkpoint()


def request() -> ModelRequest:
    return ModelRequest(messages=(UserMessage("hi"),))


async def test_a_shared_rate_limit_spaces_the_requests_of_two_models_at_two_per_second() -> None:
    time = FakeTime()
    limit = RateLimit(requests_per_second=2, clock=time.clock, sleep=time.sleep)
    server = Server(*[sse(text_stream("Hello")) for _ in range(6)])
    sent_at: list[float] = []
    original = server.handle

    def handle(request: object) -> object:
        sent_at.append(time.now)
        return original(request)  # type: ignore[arg-type]

    server.handle = handle  # type: ignore[method-assign, assignment]
    models = [OpenAIChatModel("gpt-4o-mini", api_key="k", client=server.client(), rate_limit=limit) for _ in range(2)]
    for index in range(6):
        events = await collect(models[index % 2], request())
        assert events[-1].message.content == "Hello"  # type: ignore[attr-defined]
    assert sent_at == [0.0, 0.0, 0.5, 1.0, 1.5, 2.0]


async def test_tokens_per_minute_make_a_call_wait_once_the_reported_usage_spent_the_budget() -> None:
    time = FakeTime()
    limit = RateLimit(tokens_per_minute=200, clock=time.clock, sleep=time.sleep)
    server = Server(*[sse(text_stream("Hello")) for _ in range(3)])  # each reports 120 + 9 tokens used
    model = OpenAIChatModel("gpt-4o-mini", api_key="k", client=server.client(), rate_limit=limit)
    started: list[float] = []
    for _ in range(3):
        started.append(time.now)
        await collect(model, request())
    # 200 - 129 - 129 < 0: the third call waits until a minute's refill covers its estimate again.
    assert started[:2] == [0.0, 0.0]
    assert 15 < time.now < 30 and len(server.requests) == 3


def test_a_rate_limit_takes_only_numbers_above_zero() -> None:
    with pytest.raises(ValueError, match="requests_per_second"):
        RateLimit(requests_per_second=0)
    with pytest.raises(TypeError, match="rate_limit"):
        OpenAIChatModel("m", api_key="k", rate_limit="fast")  # type: ignore[arg-type]


async def test_runs_past_the_cap_wait_idle_and_all_complete() -> None:
    go = trio.Event()

    async def held(request: ModelRequest) -> AssistantMessage:
        await go.wait()
        return AssistantMessage("done")

    client = await create_agent(ScriptedModel([held], repeat_last=True), max_concurrent_runs=2)
    handles = [await client.start("go", config=AgentRunConfig(f"s{index}")) for index in range(5)]
    with trio.fail_after(10):
        while sorted(handle.state for handle in handles) != ["awaiting_model"] * 2 + ["idle"] * 3:
            await trio.sleep(0.01)
        queued = [handle for handle in handles if handle.state == "idle"]
        queued[0].cancel()  # a queued run can be cancelled; it never reached the model
        go.set()
        for handle in handles:
            await handle.wait()
    assert [handle.state for handle in handles].count("completed") == 4
    assert queued[0].state == "cancelled"

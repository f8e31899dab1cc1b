"""Tool timeouts (async tools cancelled, thread tools abandoned) and the request deadline."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import trio
from support import asks, call, phases

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    RequestDeadlineExceeded,
    ScriptedModel,
    ToolMessage,
    ToolStatus,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent, RunFailedEvent
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.tools.threads import abandoned_tool_threads


def results(client: Any, session_id: str) -> list[ToolMessage]:
    return [m for m in client.agent.history.load(session_id) if isinstance(m, ToolMessage)]


async def _collect(client: Any, text: str, config: AgentRunConfig) -> tuple[list[AgentEvent], BaseException | None]:
    seen: list[AgentEvent] = []
    try:
        async for event in client.stream(text, config=config):
            seen.append(event)
    except Exception as error:
        return seen, error
    return seen, None


# tool timeouts -------------------------------------------------------------------


async def test_an_async_tool_past_its_timeout_is_cancelled_and_says_it_may_have_taken_effect() -> None:
    ledger: list[str] = []

    @tool(timeout=0.05)
    async def hang() -> str:
        """Never returns."""
        ledger.append("started")
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            ledger.append("cancelled")
            raise
        return "never"

    model = ScriptedModel([asks(call("c1", "hang")), AssistantMessage("gave up")])
    client = await create_agent(model, tools=[hang])
    seen, error = await _collect(client, "go", AgentRunConfig(session_id="s"))
    assert error is None
    assert ledger == ["started", "cancelled"]
    [result] = results(client, "s")
    assert result.status is ToolStatus.FAILED
    assert result.text == "timed out: hang did not finish within 0.05 s; it may or may not have taken effect"
    assert ("awaiting_tool", "call_timed_out", "awaiting_tool") in phases(seen)


async def test_an_idempotent_tool_times_out_without_the_warning_and_the_agent_default_applies() -> None:
    @tool(idempotent=True)
    async def lookup() -> str:
        """Never returns."""
        await trio.sleep_forever()
        return "never"

    @tool(timeout=5)
    async def quick() -> str:
        """Returns at once, its own timeout overriding the agent's."""
        await trio.sleep(0.1)
        return "quick"

    model = ScriptedModel([asks(call("c1", "lookup"), call("c2", "quick")), AssistantMessage("ok")])
    client = await create_agent(model, tools=[lookup, quick], tool_timeout=0.05)
    await client.run("go", config=AgentRunConfig(session_id="s"))
    first, second = results(client, "s")
    assert first.text == "timed out: lookup did not finish within 0.05 s"
    assert (second.status, second.text) == (ToolStatus.SUCCEEDED, "quick")


async def test_a_thread_tool_past_its_timeout_is_abandoned_and_its_late_result_dropped() -> None:
    release = threading.Event()
    ledger: list[str] = []

    @tool(thread=True, timeout=0.05)
    def block() -> str:
        """Blocks until released."""
        release.wait(10)
        ledger.append("returned")
        return "late"

    before = abandoned_tool_threads()
    model = ScriptedModel([asks(call("c1", "block")), AssistantMessage("moved on")])
    client = await create_agent(model, tools=[block])
    answer = await client.run("go", config=AgentRunConfig(session_id="s"))
    assert answer.content == "moved on"
    assert abandoned_tool_threads() == before + 1
    release.set()
    with trio.fail_after(5):
        while abandoned_tool_threads() > before:
            await trio.sleep(0.01)
    assert ledger == ["returned"]
    [result] = results(client, "s")
    assert result.text.startswith("timed out: block did not finish within 0.05 s")  # "late" never recorded


async def test_after_a_hundred_hung_thread_tools_requests_and_store_threads_still_run() -> None:
    release = threading.Event()

    @tool(thread=True, timeout=0.2)
    def hang(n: int) -> str:
        """Blocks until released."""
        release.wait(30)
        return "late"

    hung = asks(*[call(f"c{n}", "hang", n=n) for n in range(100)])
    model = ScriptedModel([hung, AssistantMessage("all timed out"), AssistantMessage("next")])
    client = await create_agent(model, tools=[hang])
    try:
        await client.run("go", config=AgentRunConfig(session_id="s"))
        assert all(m.text.startswith("timed out") for m in results(client, "s"))
        assert abandoned_tool_threads() >= 1
        started = time.monotonic()
        assert (await client.run("again", config=AgentRunConfig(session_id="t"))).content == "next"
        assert time.monotonic() - started < 1.0
        started = time.monotonic()
        # What a store or a run claim does: a blocking call on trio's default thread limiter.
        assert await trio.to_thread.run_sync(lambda: "stored") == "stored"
        assert time.monotonic() - started < 1.0
    finally:
        release.set()


# the request deadline -----------------------------------------------------------


async def test_a_request_past_its_deadline_ends_with_a_typed_error_and_a_terminal_event() -> None:
    @tool
    async def slow() -> str:
        """Takes long."""
        await trio.sleep(10)
        return "never"

    model = ScriptedModel([asks(call("c1", "slow")), AssistantMessage("never")])
    client = await create_agent(model, tools=[slow])
    seen, error = await _collect(client, "go", AgentRunConfig(session_id="s", deadline=0.1))
    assert isinstance(error, RequestDeadlineExceeded) and error.seconds == 0.1
    assert isinstance(seen[-1], RunFailedEvent) and isinstance(seen[-1].error, RequestDeadlineExceeded)
    assert phases(seen)[-1] == ("awaiting_tool", "deadline_passed", "failed")
    [result] = results(client, "s")
    assert result.status is ToolStatus.CANCELLED and "deadline" in result.text


async def test_a_stalled_model_is_cut_off_by_the_deadline() -> None:
    async def stall(request: Any) -> AssistantMessage:
        await trio.sleep_forever()
        raise AssertionError("not reached")

    client = await create_agent(ScriptedModel([stall]))
    with trio.fail_after(5), pytest.raises(RequestDeadlineExceeded):
        await client.run("go", config=AgentRunConfig(session_id="s", deadline=0.05))
    last = client.transitions("s", region="phase")[-1]
    assert (last.source, last.trigger, last.dest) == ("awaiting_model", "deadline_passed", "failed")


async def test_time_spent_waiting_for_an_approval_does_not_count_against_the_deadline() -> None:
    @tool
    async def act() -> str:
        """Needs approval."""
        return "acted"

    approvals = ToolApprovalExtension({"act": "ask"})
    model = ScriptedModel([asks(call("c1", "act")), AssistantMessage("done")])
    client = await create_agent(model, tools=[act], extensions=[approvals])
    config = AgentRunConfig(session_id="s", deadline=0.5)
    async with trio.open_nursery() as nursery:
        outcome: list[Any] = []

        async def run() -> None:
            outcome.append(await client.run("go", config=config))

        nursery.start_soon(run)
        with trio.fail_after(5):
            while not client.pending("s"):
                await trio.sleep(0.01)
        await trio.sleep(1.0)  # twice the deadline, waiting for a person
        delivered = client.deliver(
            approvals_answer("c1", True), config=AgentRunConfig(session_id="s")
        )
        assert delivered.accepted
    assert outcome[0].content == "done"


def approvals_answer(call_id: str, approved: bool) -> Any:
    from orchestrator import ExternalEvent

    return ExternalEvent("tool_approval_response", {"tool_call_id": call_id, "approved": approved})


async def test_a_thread_tool_without_a_timeout_is_still_waited_for_when_its_request_is_cancelled() -> None:
    started, ledger = threading.Event(), []

    @tool(thread=True)
    def work() -> str:
        """Blocks a little."""
        started.set()
        time.sleep(0.3)
        ledger.append("returned")
        return "done"

    model = ScriptedModel([asks(call("c1", "work")), AssistantMessage("never")])
    client = await create_agent(model, tools=[work])
    before = abandoned_tool_threads()
    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run, "go")
            await trio.to_thread.run_sync(started.wait, 5)
            nursery.cancel_scope.cancel()
    assert ledger == ["returned"]  # the cancelled request waited for its thread
    assert abandoned_tool_threads() == before


class SlowHook(AgentExtension):
    """Sleeps in one hook, so the request's deadline passes there."""

    def __init__(self, hook: str) -> None:
        self.hook = hook

    async def _sleep(self, hook: str) -> None:
        if hook == self.hook:
            await trio.sleep(10)

    async def before_run(self, context: Any) -> None:
        await self._sleep("before_run")

    async def after_model(self, context: Any, response: Any) -> None:
        await self._sleep("after_model")

    async def after_turn(self, context: Any, response: Any) -> None:
        await self._sleep("after_turn")

    async def after_run(self, context: Any, response: Any) -> None:
        await self._sleep("after_run")


@pytest.mark.parametrize(
    ("hook", "script", "phase"),
    [
        ("before_run", [AssistantMessage("never")], "setup"),
        ("after_model", [AssistantMessage("answer")], "answered"),
        ("after_turn", [asks(call("c1", "noop")), AssistantMessage("answer")], "turn_settled"),
        ("after_run", [AssistantMessage("answer")], "concluding"),
    ],
)
async def test_the_deadline_ends_a_request_wherever_it_runs(hook: str, script: list[Any], phase: str) -> None:
    @tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    client = await create_agent(ScriptedModel(script), tools=[noop], extensions=[SlowHook(hook)])
    with trio.fail_after(5), pytest.raises(RequestDeadlineExceeded):
        await client.run("go", config=AgentRunConfig(session_id="s", deadline=0.05))
    last = client.transitions("s", region="phase")[-1]
    assert (last.source, last.trigger, last.dest) == (phase, "deadline_passed", "failed")


async def test_a_call_times_out_beside_a_call_waiting_for_approval() -> None:
    @tool
    async def deploy() -> str:
        """Needs approval."""
        return "deployed"

    @tool(timeout=0.1)
    async def hang() -> str:
        """Never returns."""
        await trio.sleep_forever()
        return "never"

    approvals = ToolApprovalExtension({"deploy": "ask"}, expires_after=0.5)
    model = ScriptedModel([asks(call("c1", "deploy"), call("c2", "hang")), AssistantMessage("done")])
    client = await create_agent(model, tools=[deploy, hang], extensions=[approvals])
    seen, error = await _collect(client, "go", AgentRunConfig(session_id="s"))
    assert error is None
    assert ("awaiting_approval", "call_timed_out", "awaiting_approval") in phases(seen)
    found = {m.tool_call_id: m.text for m in results(client, "s")}
    assert found["c2"].startswith("timed out: hang did not finish within 0.1 s")
    assert "expired" in found["c1"]

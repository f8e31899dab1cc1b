"""Waits that expire, in one process: each takes its default, says so in an event, and refuses a late answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from support import asks, call

from orchestrator import (
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    ResponseRouter,
    ScriptedModel,
    ToolCall,
    ToolMessage,
    ToolStatus,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent, TransitionEvent, WaitExpiredEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.runtime.pending import ResponseExpired


async def collect(client: Any, text: str, session_id: str = "s") -> list[AgentEvent]:
    seen: list[AgentEvent] = []
    with trio.fail_after(10):
        async for event in client.stream(text, config=AgentRunConfig(session_id=session_id)):
            seen.append(event)
    return seen


def results(client: Any, session_id: str = "s") -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in client.agent.history.load(session_id) if isinstance(m, ToolMessage)}


def steps(events: list[AgentEvent], machine: str) -> list[tuple[str, str, str]]:
    return [(e.source, e.trigger, e.dest) for e in events if isinstance(e, TransitionEvent) and e.machine == machine]


async def test_an_approval_nobody_answers_expires_declined_and_the_tool_does_not_run() -> None:
    ledger: list[str] = []

    @tool
    def deploy() -> str:
        """Deploys."""
        ledger.append("deployed")
        return "deployed"

    approvals = ToolApprovalExtension({"deploy": "ask"}, expires_after=0.05)
    model = ScriptedModel([asks(call("c1", "deploy")), AssistantMessage("not deployed: nobody approved")])
    client = await create_agent(model, tools=[deploy], extensions=[approvals])
    events = await collect(client, "deploy it")
    assert ledger == []
    result = results(client)["c1"]
    assert result.status is ToolStatus.FAILED
    assert result.text == (
        "rejected: the approval of deploy expired: nobody answered within 0.05 s, so the call was declined and did not run"
    )
    [expired] = [e for e in events if isinstance(e, WaitExpiredEvent)]
    assert "expired" in expired.name
    assert (expired.tool_call_id, expired.awaited_event, expired.outcome) == ("c1", "tool_approval_response", "declined")
    assert steps(events, "tool_approval") == [("deciding", "decide", "asking"), ("asking", "expire", "expired")]
    assert events[-1].name == "run_completed"
    # A late answer is refused, saying why.
    late = client.deliver(
        ExternalEvent("tool_approval_response", {"tool_call_id": "c1", "approved": True}),
        config=AgentRunConfig(session_id="s"),
    )
    assert late.accepted == ()
    assert late.refused[approvals.name] == "call tool_call_id='c1' expired: nobody answered it within 0.05 s"


async def test_an_answer_in_time_is_taken_and_nothing_expires() -> None:
    @tool
    def deploy() -> str:
        """Deploys."""
        return "deployed"

    approvals = ToolApprovalExtension({"deploy": "ask"}, expires_after=30)
    model = ScriptedModel([asks(call("c1", "deploy")), AssistantMessage("done")])
    client = await create_agent(model, tools=[deploy], extensions=[approvals])
    events: list[AgentEvent] = []

    async def answer() -> None:
        with trio.fail_after(10):
            while not client.pending("s"):
                await trio.sleep(0.01)
        delivered = client.deliver(
            ExternalEvent("tool_approval_response", {"tool_call_id": "c1", "approved": True}),
            config=AgentRunConfig(session_id="s"),
        )
        assert delivered.accepted

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer)
        events.extend(await collect(client, "deploy it"))
    assert results(client)["c1"].text == "deployed"
    assert not [e for e in events if isinstance(e, WaitExpiredEvent)]


async def test_a_question_nobody_answers_gets_a_failed_result_and_the_request_goes_on() -> None:
    asking = AskUserExtension(expires_after=0.05)
    model = ScriptedModel([asks(call("q1", "ask_user", question="Which?", options=["a", "b"])), AssistantMessage("chose a")])
    client = await create_agent(model, extensions=[asking])
    events = await collect(client, "pick")
    result = results(client)["q1"]
    assert (result.status, result.text) == (ToolStatus.FAILED, "nobody answered the question within 0.05 s")
    [expired] = [e for e in events if isinstance(e, WaitExpiredEvent)]
    assert expired.outcome == "unanswered"
    assert events[-1].name == "run_completed"
    late = client.deliver(
        ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "a"}), config=AgentRunConfig(session_id="s")
    )
    assert "expired" in late.refused[asking.name]


async def test_a_plan_mode_proposal_nobody_answers_is_declined(tmp_path: Path) -> None:
    plan_mode = PlanModeExtension(root=tmp_path, expires_after=0.05)
    model = ScriptedModel([asks(call("p1", "enter_plan_mode", reason="risky")), AssistantMessage("no plan then")])
    client = await create_agent(model, extensions=[plan_mode])
    events = await collect(client, "migrate")
    assert plan_mode.mode("s") == "normal"
    assert steps(events, "plan_mode") == [
        ("normal", "propose_entry", "entry_awaiting_approval"),
        ("entry_awaiting_approval", "expire", "normal"),
    ]
    result = results(client)["p1"]
    assert result.status is ToolStatus.FAILED and "expired" in result.text
    [expired] = [e for e in events if isinstance(e, WaitExpiredEvent)]
    assert expired.outcome == "declined"
    late = client.deliver(
        ExternalEvent("enter_plan_mode_response", {"tool_call_id": "p1", "approved": True}),
        config=AgentRunConfig(session_id="s"),
    )
    assert "expired" in late.refused[plan_mode.name]


async def test_any_response_router_wait_can_expire_with_its_deadline_a_plain_value() -> None:
    router = ResponseRouter()
    seen: list[Any] = []

    @tool
    async def confirm(context: AgentRunContext, call: ToolCall) -> str:
        """Waits for a confirmation."""
        try:
            await router.wait(context, call.id, response_event="confirm_response", expires_after=0.05)
        except ResponseExpired as expired:
            seen.append(expired)
            return f"expired at {expired.expires_at:.0f}"
        return "confirmed"

    model = ScriptedModel([asks(call("w1", "confirm")), AssistantMessage("ok")])
    client = await create_agent(model, tools=[confirm])
    events = await collect(client, "confirm")
    [expired] = seen
    assert isinstance(expired.expires_at, float) and expired.seconds == 0.05
    assert [e.tool_call_id for e in events if isinstance(e, WaitExpiredEvent)] == ["w1"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ToolApprovalExtension(expires_after=0), "ToolApprovalExtension.expires_after must be more than 0"),
        (lambda: AskUserExtension(expires_after=-1), "AskUserExtension.expires_after must be more than 0"),
        (lambda: PlanModeExtension(expires_after="soon"), "PlanModeExtension.expires_after must be a number or None"),
    ],
)
def test_a_bad_expires_after_is_refused_at_construction(make: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError)) as raised:
        make()
    assert message in str(raised.value)



async def test_with_a_session_store_an_expired_approval_is_not_left_pending(tmp_path: Path) -> None:
    from orchestrator.extensions.sqlite_store import SQLiteSessionStore

    @tool
    def deploy() -> str:
        """Deploys."""
        return "deployed"

    approvals = ToolApprovalExtension({"deploy": "ask"}, expires_after=0.05)
    model = ScriptedModel([asks(call("c1", "deploy")), AssistantMessage("not deployed")])
    client = await create_agent(
        model, tools=[deploy], extensions=[approvals, SQLiteSessionStore(tmp_path / "s.db")], history=None
    )
    events = await collect(client, "deploy it")
    assert events[-1].name == "run_completed"
    assert client.pending("s") == []
    late = client.deliver(
        ExternalEvent("tool_approval_response", {"tool_call_id": "c1", "approved": True}),
        config=AgentRunConfig(session_id="s"),
    )
    assert late.accepted == ()
    assert "expired" in late.refused[approvals.name]


async def test_a_plan_mode_exit_proposal_nobody_answers_is_declined_and_planning_goes_on(tmp_path: Path) -> None:
    plan_mode = PlanModeExtension(root=tmp_path, expires_after=0.05)
    model = ScriptedModel(
        [
            asks(call("p1", "enter_plan_mode", reason="risky")),
            asks(call("p2", "exit_plan_mode", plan="1. do it")),
            AssistantMessage("still planning"),
        ]
    )
    client = await create_agent(model, extensions=[plan_mode])
    events: list[AgentEvent] = []

    async def approve_entry() -> None:
        with trio.fail_after(10):
            while not client.pending("s"):
                await trio.sleep(0.001)
        delivered = client.deliver(
            ExternalEvent("enter_plan_mode_response", {"tool_call_id": "p1", "approved": True}),
            config=AgentRunConfig(session_id="s"),
        )
        assert delivered.accepted

    plan_mode.expires_after = 5.0  # the entry waits for its answer; the exit is left to expire
    async with trio.open_nursery() as nursery:
        nursery.start_soon(approve_entry)

        async def run() -> None:
            async for event in client.stream("migrate", config=AgentRunConfig(session_id="s")):
                events.append(event)
                if event.name == "plan_mode_entered":
                    plan_mode.expires_after = 0.05

        nursery.start_soon(run)
    assert ("exit_awaiting_approval", "expire", "plan_active") in steps(events, "plan_mode")
    assert plan_mode.mode("s") == "plan_active"

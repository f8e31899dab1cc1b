"""Approval answers that edit the call, policies that read the arguments, and who answered, recorded."""

from __future__ import annotations

import time
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
    ScriptedModel,
    ToolCall,
    ToolMessage,
    ToolStatus,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent, TransitionEvent
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.extensions.tool_approval import ToolApprovalExtension, ToolPolicy

paid: list[tuple[str, int]] = []


@tool
def pay(to: str, amount: int) -> str:
    """Pay someone.

    Args:
        to: who is paid
        amount: how much, in cents
    """
    paid.append((to, amount))
    return f"paid {amount} to {to}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    paid.clear()


def _answer(client: Any, session: str, payload: dict[str, Any]) -> Any:
    return client.deliver(ExternalEvent("tool_approval_response", payload), config=AgentRunConfig(session))


async def _run(client: Any, session: str, answers: list[dict[str, Any]]) -> tuple[list[AgentEvent], list[Any]]:
    """One request; each tool_approval gets the next answers in turn (tool_call_id filled in) until one is taken."""
    events: list[AgentEvent] = []
    verdicts: list[Any] = []
    with trio.fail_after(10):
        async for event in client.stream("pay the bill", config=AgentRunConfig(session)):
            events.append(event)
            if event.name == "tool_approval":
                while True:
                    payload = {"tool_call_id": event.payload["tool_call_id"], **answers.pop(0)}
                    delivery = _answer(client, session, payload)
                    verdicts.append(True if delivery else delivery.refused["ToolApprovalExtension"])
                    if delivery:
                        break
                    # refused: the call still waits for an answer
                    assert [p.tool_call_id for p in client.pending(session)] == [event.payload["tool_call_id"]]
    return events, verdicts


def _named(events: list[AgentEvent], name: str) -> list[AgentEvent]:
    return [e for e in events if e.name == name]


async def test_an_approval_with_edited_arguments_runs_the_call_with_them_and_records_them(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    model = ScriptedModel([asks(call("c1", "pay", to="bob", amount=5000)), AssistantMessage("done")])
    client = await create_agent(
        model, tools=[pay], extensions=[store, ToolApprovalExtension({"pay": "ask"})], history=None
    )
    before = time.time()
    events, verdicts = await _run(
        client, "s", [{"approved": True, "arguments": {"to": "bob", "amount": 500}, "answered_by": "ada"}]
    )
    assert verdicts == [True]
    assert paid == [("bob", 500)]
    (answered,) = _named(events, "tool_approval_answered")
    assert answered.payload["arguments"] == {"to": "bob", "amount": 500}
    assert answered.payload["edited"] is True and answered.payload["approved"] is True
    assert answered.payload["answered_by"] == "ada"
    assert before <= answered.payload["answered_at"] <= time.time()
    # the tool's outcome event shows the call as it ran
    (completed,) = _named(events, "tool_completed")
    assert completed.payload["call"].arguments == {"to": "bob", "amount": 500}
    assert ("tool_approval", "decision", "asking", "approve", "edited") in [
        (e.machine, e.region, e.source, e.trigger, e.dest) for e in events if isinstance(e, TransitionEvent)
    ]
    # the stored history: the model's call as it asked, and the result with who approved what, and when
    stored = store.messages("s")
    (result,) = [m for m in stored if isinstance(m, ToolMessage)]
    assert result.status is ToolStatus.SUCCEEDED and result.text == "paid 500 to bob"
    assert result.approval == {
        "approved": True,
        "answered_by": "ada",
        "answered_at": answered.payload["answered_at"],
        "reason": None,
        "arguments": {"to": "bob", "amount": 500},
        "edited": True,
    }
    requested = [m for m in stored if isinstance(m, AssistantMessage) and m.tool_calls]
    assert requested[0].tool_calls[0].arguments == {"to": "bob", "amount": 5000}


async def test_a_bad_edit_is_refused_with_its_reason_and_the_call_keeps_waiting() -> None:
    model = ScriptedModel([asks(call("c1", "pay", to="bob", amount=5000)), AssistantMessage("done")])
    client = await create_agent(model, tools=[pay], extensions=[ToolApprovalExtension({"pay": "ask"})])
    events, verdicts = await _run(
        client,
        "s",
        [
            {"approved": True, "arguments": {"to": "bob", "amount": "lots"}},
            {"approved": True, "arguments": {"amount": 10}},
            {"approved": False, "arguments": {"to": "bob", "amount": 10}},
            {"approved": True, "arguments": ["bob", 10]},
            {"approved": True, "answered_by": ""},
            {"approved": True, "arguments": {"to": "eve", "amount": 10}},
        ],
    )
    assert verdicts == [
        "the edited arguments do not fit pay: amount: expected an integer, got 'lots'",
        "the edited arguments do not fit pay: missing required argument(s): to",
        "'arguments' can only come with an approval",
        "'arguments' must be an object or null, got list",
        "'answered_by' must be a non-blank string or null",
        True,
    ]
    assert paid == [("eve", 10)]
    (answered,) = _named(events, "tool_approval_answered")
    assert answered.payload["answered_by"] == "local"


async def test_an_approval_without_edits_runs_the_models_arguments_and_says_so() -> None:
    model = ScriptedModel([asks(call("c1", "pay", to="bob", amount=5)), AssistantMessage("done")])
    client = await create_agent(model, tools=[pay], extensions=[ToolApprovalExtension({"pay": "ask"})])
    events, _ = await _run(client, "s", [{"approved": True, "arguments": {"to": "bob", "amount": 5}}])
    (answered,) = _named(events, "tool_approval_answered")
    assert answered.payload["edited"] is False and answered.payload["arguments"] == {"to": "bob", "amount": 5}
    assert paid == [("bob", 5)]
    (result,) = [e.payload["result"] for e in _named(events, "tool_completed")]
    assert result.approval["edited"] is False


async def test_a_callable_policy_asks_only_above_an_amount() -> None:
    decided: list[tuple[str, int, str]] = []

    def above_100(call_: ToolCall, arguments: dict[str, Any], context: AgentRunContext) -> str:
        decided.append((call_.id, arguments["amount"], context.session_id))
        return "ask" if arguments["amount"] > 100 else "allow"

    model = ScriptedModel(
        [
            asks(call("small", "pay", to="bob", amount=50), call("big", "pay", to="bob", amount=500)),
            AssistantMessage("ok"),
        ]
    )
    client = await create_agent(model, tools=[pay], extensions=[ToolApprovalExtension({"pay": above_100})])
    events, _ = await _run(client, "s", [{"approved": False, "reason": "too much"}])
    assert sorted(decided) == [("big", 500, "s"), ("small", 50, "s")]  # concurrent calls: either order
    assert [e.payload["tool_call_id"] for e in _named(events, "tool_approval")] == ["big"]
    assert paid == [("bob", 50)]
    (declined,) = _named(events, "tool_failed")
    result = declined.payload["result"]
    assert result.text == "rejected: the user declined pay: too much"
    assert result.approval is not None and result.approval["approved"] is False
    assert result.approval["answered_by"] == "local" and "arguments" not in result.approval


async def test_an_async_policy_for_every_tool_and_one_that_fails_denies_the_call_saying_why() -> None:
    async def every_call(call_: ToolCall, arguments: dict[str, Any], context: AgentRunContext) -> str:
        await trio.lowlevel.checkpoint()
        if arguments["amount"] < 0:
            raise ValueError("a negative amount")
        return "maybe" if arguments["amount"] == 7 else "allow"

    model = ScriptedModel(
        [
            asks(call("a", "pay", to="bob", amount=-1), call("b", "pay", to="bob", amount=7)),
            asks(call("c", "pay", to="bob", amount=3)),
            AssistantMessage("ok"),
        ]
    )
    client = await create_agent(model, tools=[pay], extensions=[ToolApprovalExtension(every_call)])
    events, _ = await _run(client, "s", [])
    failed = {e.payload["call"].id: e.payload["result"].text for e in _named(events, "tool_failed")}
    assert failed == {
        "a": "rejected: the tool policy for pay failed: ValueError: a negative amount",
        "b": "rejected: the tool policy for pay failed: it returned 'maybe', not one of allow, ask, deny",
    }
    assert paid == [("bob", 3)]


def test_a_policy_of_anything_but_verdicts_and_callables_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="'sometimes' is not one of allow, ask, deny"):
        ToolApprovalExtension({"pay": "sometimes"})
    with pytest.raises(TypeError, match="must be a ToolPolicy, a mapping, a callable or None"):
        ToolApprovalExtension(42)  # type: ignore[arg-type]
    assert callable(ToolPolicy({"pay": lambda c, a, x: "ask"}).verdict("pay"))

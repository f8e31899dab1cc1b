"""Agent.deliver: who took an external event, and each refusal's reason."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
import trio
from support import asks, call, unchecked

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ScriptedModel,
    UserMessage,
    create_agent,
)
from orchestrator.delivery import Delivery, Refusal
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.steering import SteeringExtension

ASK = "AskUserExtension"


def answer(tool_call_id: Any, value: object = "sqlite", **extra: Any) -> ExternalEvent:
    return ExternalEvent("ask_user_response", {"tool_call_id": tool_call_id, "answer": value, **extra})


async def test_each_refusal_of_an_answer_says_why() -> None:
    question = call("q1", "ask_user", question="Which database?", options=["sqlite", "postgres"])
    client = await create_agent(
        ScriptedModel([asks(question), AssistantMessage("ok")]), extensions=[AskUserExtension()]
    )
    nothing_waits = client.deliver(answer("q1"), config=AgentRunConfig("s1"))
    assert nothing_waits.refused == {ASK: "no waiting call tool_call_id='q1' in session 's1'"}
    assert not nothing_waits and nothing_waits.accepted == ()
    reasons: dict[str, str] = {}
    taken: list[Delivery] = []
    with trio.fail_after(10):
        async for event in client.stream("set up", config=AgentRunConfig("s1", request_id="r1")):
            if event.name != "ask_user":
                continue
            attempts = {
                "wrong id": (answer("x"), AgentRunConfig("s1")),
                "wrong session": (answer("q1"), AgentRunConfig("s2")),
                "wrong request": (answer("q1"), AgentRunConfig("s1", request_id="r9")),
                "not an object": (unchecked(ExternalEvent, name=ASK_RESPONSE, payload=["q1"]), AgentRunConfig("s1")),
                "no id": (ExternalEvent("ask_user_response", {"answer": "sqlite"}), AgentRunConfig("s1")),
                "id not text": (answer(7), AgentRunConfig("s1")),
                "answer not text": (answer("q1", 5), AgentRunConfig("s1")),
                "not an option": (answer("q1", "mysql"), AgentRunConfig("s1")),
            }
            for label, (sent, config) in attempts.items():
                delivery = client.deliver(sent, config=config)
                assert not delivery and list(delivery.refused) == [ASK], label
                reasons[label] = delivery.refused[ASK]
            taken.append(client.deliver(answer("q1"), config=AgentRunConfig("s1", request_id="r1")))
            reasons["answered twice"] = client.deliver(answer("q1", "postgres"), config=AgentRunConfig("s1")).refused[
                ASK
            ]
    assert reasons == {
        "wrong id": "no waiting call tool_call_id='x' in session 's1'",
        "wrong session": "no waiting call tool_call_id='q1' in session 's2'",
        "wrong request": "call tool_call_id='q1' waits in request 'r1', not 'r9'",
        "not an object": "the payload must be an object, got list",
        "no id": "missing 'tool_call_id'",
        "id not text": "'tool_call_id' must be a string, got int",
        "answer not text": "'answer' must be a string",
        "not an option": "'answer' must be one of ['sqlite', 'postgres']",
        "answered twice": "no waiting call tool_call_id='q1' in session 's1'",
    }
    [delivery] = taken
    assert delivery and delivery.accepted == (ASK,) and delivery.refused == {} and delivery.reason == ""


async def test_plan_mode_says_approved_must_be_a_bool(tmp_path: Any) -> None:
    model = ScriptedModel([asks(call("e1", "enter_plan_mode", reason="big")), AssistantMessage("done")])
    client = await create_agent(model, extensions=[PlanModeExtension(root=tmp_path)])
    seen: list[dict[str, str]] = []
    with trio.fail_after(10):
        async for event in client.stream("go", config=AgentRunConfig("s1")):
            if event.name == "enter_plan_mode":
                for approved in ("yes", None):
                    payload: dict[str, Any] = {"tool_call_id": "e1"}
                    if approved is not None:
                        payload["approved"] = approved
                    delivery = client.deliver(
                        ExternalEvent("enter_plan_mode_response", payload), config=AgentRunConfig("s1")
                    )
                    seen.append(dict(delivery.refused))
                reply = ExternalEvent("enter_plan_mode_response", {"tool_call_id": "e1", "approved": True})
                assert client.deliver(reply, config=AgentRunConfig("s1")).accepted == ("PlanModeExtension",)
    assert seen == [
        {"PlanModeExtension": "'approved' must be a bool, got str"},
        {"PlanModeExtension": "missing 'approved'"},
    ]


ASK_RESPONSE = "ask_user_response"


def steer(payload: Any) -> ExternalEvent:
    """A steering event; one whose payload is not a mapping is made without its checks (as a hostile caller could)."""
    if isinstance(payload, Mapping):
        return ExternalEvent("steering_message", payload)
    return unchecked(ExternalEvent, name="steering_message", payload=payload)


async def test_steering_refusals_say_why() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("hi")]), extensions=[SteeringExtension()])
    name = "SteeringExtension"

    def reason(payload: Any, config: AgentRunConfig | None = None) -> str:
        delivery = client.deliver(steer(payload), config=config or AgentRunConfig("s1"))
        assert not delivery
        return delivery.refused[name]

    assert reason({"content": "stop"}) == "no running request in session 's1'"
    assert reason({"content": "stop"}, AgentRunConfig("s1", "r1")) == "no running request 'r1' in session 's1'"
    assert reason({"content": "   "}) == "'content' is blank"
    assert reason({"content": 5}) == "give 'content' text or a UserMessage as 'message'"
    assert reason({"message": "text"}) == "'message' must be a UserMessage, got str"
    assert reason({"message": UserMessage(" ")}) == "'message' has neither text nor an image"
    assert reason("stop") == "the payload must be an object, got str"


async def test_events_for_nobody_have_a_reason_too() -> None:
    client = await create_agent(ScriptedModel([]), extensions=[AskUserExtension()])
    delivery = client.deliver(ExternalEvent("something_else", {}), config=AgentRunConfig("s1"))
    assert delivery == Delivery("something_else", (), {})
    assert delivery.reason == "no extension takes 'something_else' events"
    refused = client.deliver(answer("q"), config=AgentRunConfig("s1"))
    assert refused.reason == "AskUserExtension: no waiting call tool_call_id='q' in session 's1'"


class OldStyle(AgentExtension):
    """Overrides accept only, as extensions written before consider do."""

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        return event.name == "ping"


class Explains(AgentExtension):
    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> bool | Refusal:
        if event.name != "ping":
            return False
        return True if event.payload.get("ok") else Refusal("'ok' must be set")


class Breaks(AgentExtension):
    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> bool | Refusal:
        raise RuntimeError("database is gone")


async def test_old_and_new_extensions_side_by_side(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="orchestrator")
    client = await create_agent(ScriptedModel([]), extensions=[OldStyle(), Explains(), Breaks()])
    config = AgentRunConfig("s1")
    declined = client.deliver(ExternalEvent("ping", {}), config=config)
    assert declined.accepted == ("OldStyle",)
    assert declined.refused == {"Explains": "'ok' must be set", "Breaks": "failed: RuntimeError: database is gone"}
    assert client.agent.emit_external_event(ExternalEvent("ping", {"ok": True}), config=config) == [
        "OldStyle",
        "Explains",
    ]
    assert Explains().accept(config, ExternalEvent("ping", {"ok": True})) is True
    assert Explains().accept(config, ExternalEvent("ping", {})) is False
    assert "consider() of Breaks failed" in caplog.text
    assert "Explains refused ping for session 's1': 'ok' must be set" in caplog.text

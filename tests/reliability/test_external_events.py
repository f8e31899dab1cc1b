"""Whatever a caller hands ``emit_external_event``, no request is left answered-but-asleep."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import trio

from orchestrator import AgentRunConfig, AssistantMessage, ExternalEvent, ScriptedModel, ToolCall, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.steering import SteeringExtension


@pytest.mark.parametrize("event", [None, {"name": "ask_user_response", "payload": {}}, "ask_user_response"])
async def test_something_that_is_not_an_external_event_raises_type_error_at_once(event: Any) -> None:
    client = await create_agent(
        ScriptedModel([]), extensions=[AskUserExtension(), PlanModeExtension(), SteeringExtension()]
    )
    with pytest.raises(TypeError, match="ExternalEvent"):
        client.agent.emit_external_event(event, config=AgentRunConfig("s"))
    with pytest.raises(TypeError, match="AgentRunConfig"):
        client.agent.emit_external_event(ExternalEvent("x"), config="s")  # type: ignore[arg-type]


class UncopyablePayload(Mapping[str, Any]):
    """Reads like a valid answer, but cannot be iterated (so it cannot be copied)."""

    def __init__(self, tool_call_id: str) -> None:
        self.data = {"tool_call_id": tool_call_id, "answer": "a"}

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("cannot iterate")

    def __len__(self) -> int:
        return len(self.data)


class Incomparable(str):
    """An answer that raises when the validator compares it with the options."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")

    __hash__ = str.__hash__


def exploding_answer(tool_call_id: str) -> dict[str, Any]:
    return {"tool_call_id": tool_call_id, "answer": Incomparable("a")}


@pytest.mark.parametrize("bad", [UncopyablePayload, exploding_answer])
async def test_a_payload_that_cannot_be_copied_or_checked_is_refused_and_the_call_keeps_waiting(bad: Any) -> None:
    model = ScriptedModel(
        [
            AssistantMessage("", [ToolCall("q1", "ask_user", {"question": "Which?", "options": ["a", "b"]})]),
            AssistantMessage("done"),
        ]
    )
    ask = AskUserExtension()
    client = await create_agent(model, extensions=[ask])
    config = AgentRunConfig("s")
    answers: list[list[str]] = []
    with trio.fail_after(10):
        async for event in client.stream("ask", config=config):
            if event.name == "ask_user":
                refused = ExternalEvent("ask_user_response", bad("q1"))
                answers.append(client.agent.emit_external_event(refused, config=config))
                answers.append(
                    client.agent.emit_external_event(
                        ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "b"}), config=config
                    )
                )
    assert answers == [[], [ask.name]]
    assert [m.content for m in model.requests[1].messages if m.role == "tool"] == ["b"]

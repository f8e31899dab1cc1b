"""AskUserExtension: questions answered through the external-event router."""

from __future__ import annotations

import trio
from support import asks, call, phases

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ScriptedModel,
    ToolMessage,
    ToolStatus,
    create_agent,
)
from orchestrator.events import AgentEvent
from orchestrator.extensions.ask_user import AskUserExtension

TAKEN = ["AskUserExtension"]


def answer(tool_call_id: str, value: object) -> ExternalEvent:
    return ExternalEvent("ask_user_response", {"tool_call_id": tool_call_id, "answer": value})


async def test_ask_user_round_trip_with_options_and_refused_answers() -> None:
    ask = AskUserExtension()
    question = call("q1", "ask_user", question="Which database?", options=["sqlite", "postgres"])
    model = ScriptedModel([asks(question), AssistantMessage("ok")])
    client = await create_agent(model, extensions=[ask])
    agent = client.agent
    assert agent.emit_external_event(answer("q1", "sqlite"), config=AgentRunConfig("s")) == []
    replies: list[list[str]] = []
    events: list[AgentEvent] = []
    with trio.fail_after(5):
        async for event in client.stream("set up storage", config=AgentRunConfig("s", request_id="r")):
            events.append(event)
            if event.name == "ask_user":
                assert event.payload == {
                    "tool_call_id": "q1",
                    "question": "Which database?",
                    "options": ("sqlite", "postgres"),
                    "response_event": "ask_user_response",
                }
                assert client.state("s") == "awaiting_approval"
                for value, config in [
                    ("mysql", AgentRunConfig("s")),
                    (5, AgentRunConfig("s")),
                    ("sqlite", AgentRunConfig("other")),
                    ("sqlite", AgentRunConfig("s", request_id="not-r")),
                ]:
                    replies.append(agent.emit_external_event(answer("q1", value), config=config))
                replies.append(agent.emit_external_event(answer("zz", "sqlite"), config=AgentRunConfig("s")))
                replies.append(agent.emit_external_event(answer("q1", "sqlite"), config=AgentRunConfig("s", "r")))
                replies.append(agent.emit_external_event(answer("q1", "postgres"), config=AgentRunConfig("s")))
    assert replies == [[], [], [], [], [], TAKEN, []]
    assert model.requests[1].messages[-1] == ToolMessage("q1", "ask_user", "sqlite", ToolStatus.SUCCEEDED)
    walk = phases(events)
    assert walk.index(("awaiting_tool", "await_approval", "awaiting_approval")) < walk.index(
        ("awaiting_approval", "resume", "awaiting_tool")
    )
    assert ask.router.waiting() == []
    assert agent.emit_external_event(answer("q1", "sqlite"), config=AgentRunConfig("s")) == []


async def test_free_answer_and_parallel_questions_are_kept_apart() -> None:
    ask = AskUserExtension()
    questions = asks(
        call("a", "ask_user", question="Name?", options=[]), call("b", "ask_user", question="Age?", options=[])
    )
    model = ScriptedModel([questions, AssistantMessage("ok")])
    client = await create_agent(model, extensions=[ask])
    asked: list[str] = []
    with trio.fail_after(5):
        async for event in client.stream("go"):
            if event.name == "ask_user":
                asked.append(event.payload["question"])
                if len(asked) == 2:
                    for call_id, reply in [("b", "36"), ("a", "Ada")]:
                        taken = client.agent.emit_external_event(answer(call_id, reply), config=AgentRunConfig())
                        assert taken == TAKEN
    assert sorted(asked) == ["Age?", "Name?"]
    results = {m.tool_call_id: m.content for m in model.requests[1].messages if isinstance(m, ToolMessage)}
    assert results == {"a": "Ada", "b": "36"}


async def test_a_question_without_options_is_an_argument_error() -> None:
    ask = AskUserExtension()
    model = ScriptedModel([asks(call("q", "ask_user", question="?")), AssistantMessage("ok")])
    client = await create_agent(model, extensions=[ask])
    names = [event.name async for event in client.stream("go")]
    assert "ask_user" not in names
    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolMessage)
    assert result.status == ToolStatus.FAILED
    assert "options" in result.content


async def test_cancelling_a_question_leaves_nothing_pending() -> None:
    ask = AskUserExtension()
    client = await create_agent(
        ScriptedModel([asks(call("q", "ask_user", question="?", options=["yes", "no"]))]), extensions=[ask]
    )
    with trio.move_on_after(5) as scope:
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "ask_user":
                scope.cancel()
    assert scope.cancelled_caught
    assert ask.router.waiting() == []
    assert client.agent.emit_external_event(answer("q", "yes"), config=AgentRunConfig("s")) == []
    history = client.agent.history.load("s")  # type: ignore[union-attr]
    assert history[-1] == ToolMessage("q", "ask_user", "not completed: request cancelled", ToolStatus.CANCELLED)

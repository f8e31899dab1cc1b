"""AskUserExtension: questions answered through the external-event router."""

from __future__ import annotations

import trio
from support import asks, call

from orchestrator import AgentRunConfig, AssistantMessage, ExternalEvent, ScriptedModel, ToolMessage, ToolStatus, create_agent
from orchestrator.extensions.ask_user import AskUserExtension


def answer(tool_call_id: str, value: object) -> ExternalEvent:
    return ExternalEvent("ask_user_response", {"tool_call_id": tool_call_id, "answer": value})


async def test_ask_user_round_trip_with_options_and_refused_answers() -> None:
    ask = AskUserExtension()
    model = ScriptedModel(
        [asks(call("q1", "ask_user", question="Which database?", options=["sqlite", "postgres"])), AssistantMessage("ok")]
    )
    client = await create_agent(model, extensions=[ask])
    agent = client.agent
    replies: list[list[str]] = []
    with trio.fail_after(5):
        async for event in client.stream("set up storage", config=AgentRunConfig("s")):
            if event.name == "ask_user":
                assert event.payload["question"] == "Which database?"
                assert event.payload["options"] == ("sqlite", "postgres")
                assert event.payload["response_event"] == "ask_user_response"
                assert client.state("s") == "awaiting_approval"
                replies.append(agent.emit_external_event(answer("q1", "mysql"), config=AgentRunConfig("s")))
                replies.append(agent.emit_external_event(answer("q1", 5), config=AgentRunConfig("s")))
                replies.append(agent.emit_external_event(answer("zz", "sqlite"), config=AgentRunConfig("s")))
                replies.append(agent.emit_external_event(answer("q1", "sqlite"), config=AgentRunConfig("other")))
                replies.append(agent.emit_external_event(answer("q1", "sqlite"), config=AgentRunConfig("s")))
                replies.append(agent.emit_external_event(answer("q1", "postgres"), config=AgentRunConfig("s")))
    assert replies == [[], [], [], [], ["AskUserExtension"], []]
    assert model.requests[1].messages[-1] == ToolMessage("q1", "ask_user", "sqlite", ToolStatus.SUCCEEDED)
    assert ask.router.waiting() == []


async def test_free_answer_and_parallel_questions_are_kept_apart() -> None:
    ask = AskUserExtension()
    model = ScriptedModel(
        [asks(call("a", "ask_user", question="Name?"), call("b", "ask_user", question="Age?")), AssistantMessage("ok")]
    )
    client = await create_agent(model, extensions=[ask])
    with trio.fail_after(5):
        async for event in client.stream("go"):
            if event.name == "ask_user":
                reply = "Ada" if event.payload["question"] == "Name?" else "36"
                taken = client.agent.emit_external_event(answer(event.payload["tool_call_id"], reply), config=AgentRunConfig())
                assert taken == ["AskUserExtension"]
    results = {m.tool_call_id: m.content for m in model.requests[1].messages if isinstance(m, ToolMessage)}
    assert results == {"a": "Ada", "b": "36"}


async def test_cancelling_a_question_leaves_nothing_pending() -> None:
    ask = AskUserExtension()
    client = await create_agent(ScriptedModel([asks(call("q", "ask_user", question="?"))]), extensions=[ask])
    with trio.move_on_after(5) as scope:
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "ask_user":
                scope.cancel()
    assert ask.router.waiting() == []
    assert client.agent.emit_external_event(answer("q", "late"), config=AgentRunConfig("s")) == []
    history = client.agent.history.load("s")  # type: ignore[union-attr]
    assert history[-1] == ToolMessage("q", "ask_user", "not completed: request cancelled", ToolStatus.CANCELLED)

"""AskUserExtension: questions answered through the external-event router."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from support import asks, call, phases

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ModelRequest,
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


async def test_three_parallel_questions_answered_out_of_order_never_cross() -> None:
    ask = AskUserExtension()
    questions = asks(*[call(key, "ask_user", question=f"{key}?", options=[]) for key in "abc"])
    model = ScriptedModel([questions, AssistantMessage("ok")])
    client = await create_agent(model, extensions=[ask])
    agent = client.agent
    asked: list[str] = []
    replies: list[list[str]] = []
    with trio.fail_after(5):
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "ask_user":
                asked.append(event.payload["tool_call_id"])
                if len(asked) == 3:
                    replies.append(agent.emit_external_event(answer("b", "for b"), config=AgentRunConfig("other")))
                    for key in "cab":
                        replies.append(agent.emit_external_event(answer(key, f"for {key}"), config=AgentRunConfig("s")))
                    replies.append(agent.emit_external_event(answer("a", "again"), config=AgentRunConfig("s")))
    assert replies == [[], TAKEN, TAKEN, TAKEN, []]
    results = {m.tool_call_id: m.content for m in model.requests[1].messages if isinstance(m, ToolMessage)}
    assert results == {"a": "for a", "b": "for b", "c": "for c"}


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"question": "", "options": []}, "question: must not be blank"),
        ({"question": "  ", "options": ["yes"]}, "question: must not be blank"),
        ({"question": "Which?", "options": ["yes", " "]}, "options: an option must not be blank"),
    ],
)
async def test_a_blank_question_or_option_is_a_failed_result_not_a_question(
    arguments: dict[str, object], problem: str
) -> None:
    ask = AskUserExtension()
    model = ScriptedModel([asks(call("q", "ask_user", **arguments)), AssistantMessage("ok")])
    client = await create_agent(model, extensions=[ask])
    with trio.fail_after(5):
        names = [event.name async for event in client.stream("go")]
    assert "ask_user" not in names
    assert model.requests[1].messages[-1] == ToolMessage(
        "q", "ask_user", f"invalid arguments for ask_user: {problem}", ToolStatus.FAILED
    )
    assert ask.router.waiting() == []


async def test_cancelling_one_session_keeps_another_sessions_question_with_the_same_request_id() -> None:
    ask = AskUserExtension()

    def script(request: ModelRequest) -> AssistantMessage:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return asks(call("q", "ask_user", question="Proceed?", options=["yes", "no"]))
        return AssistantMessage(f"{results[-1].status}: {results[-1].content}")

    client = await create_agent(ScriptedModel([script], repeat_last=True), extensions=[ask])
    agent = client.agent
    answers: dict[str, str] = {}
    cancel_a = trio.CancelScope()

    async def run_a() -> None:
        with cancel_a:
            await client.run("go", config=AgentRunConfig("A", request_id="r1"))

    async def run_b() -> None:
        answers["B"] = (await client.run("go", config=AgentRunConfig("B", request_id="r1"))).content

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_a)
            nursery.start_soon(run_b)
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(w.session_id for w in ask.router.waiting()) == ["A", "B"]
            cancel_a.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert [w.session_id for w in ask.router.waiting()] == ["B"]
            assert agent.emit_external_event(answer("q", "yes"), config=AgentRunConfig("A")) == []
            assert agent.emit_external_event(answer("q", "yes"), config=AgentRunConfig("B", "r1")) == TAKEN
    assert answers == {"B": "succeeded: yes"}
    assert ask.router.waiting() == []
    assert client.agent.history.load("A")[-1] == ToolMessage(  # type: ignore[union-attr]
        "q", "ask_user", "not completed: request cancelled", ToolStatus.CANCELLED
    )

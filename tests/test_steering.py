"""SteeringExtension: urgent input replaces the continuation of the current task."""

from __future__ import annotations

import random
import threading
import time

import pytest
import trio
from support import asks, call

from orchestrator import (
    Agent,
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ImagePart,
    ModelRequest,
    ScriptedModel,
    TextPart,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.extensions.steering import SteeringExtension, SteeringMessageEvent

SKIPPED = "skipped: new user input arrived before this call ran"


def steer(text: str) -> ExternalEvent:
    return ExternalEvent("steering_message", {"content": text})


@tool(serial=True)
def step(n: int) -> str:
    """A serial step."""
    return f"step {n}"


async def make(model: ScriptedModel, **kwargs):  # type: ignore[no-untyped-def]
    steering = SteeringExtension()
    client = await create_agent(model, extensions=[steering, *kwargs.pop("extensions", [])], **kwargs)
    return client, steering


async def test_steering_during_a_model_call_skips_every_call_of_that_message() -> None:
    holder: dict[str, object] = {}

    def respond(request: ModelRequest) -> AssistantMessage:
        taken = holder["agent"].emit_external_event(steer("Stop editing; explain first."), config=AgentRunConfig("s1"))  # type: ignore[attr-defined]
        assert taken == ["SteeringExtension"]
        return asks(call("a", "step", n=1), call("b", "step", n=2))

    model = ScriptedModel([respond, AssistantMessage("Here is the explanation.")])
    client, steering = await make(model, tools=[step])
    holder["agent"] = client.agent
    result = await client.run("edit the file", config=AgentRunConfig("s1"))
    assert result.content == "Here is the explanation."
    tail = model.requests[1].messages[-3:]
    assert tail == (
        ToolMessage("a", "step", SKIPPED, ToolStatus.SKIPPED),
        ToolMessage("b", "step", SKIPPED, ToolStatus.SKIPPED),
        UserMessage("Stop editing; explain first."),
    )
    assert [s.trigger for s in client.transitions("s1") if s.region == "phase"].count("steer") == 1
    assert steering.routed() == []


async def test_steering_during_a_batch_lets_the_running_call_finish_and_skips_the_rest() -> None:
    holder: dict[str, object] = {}

    @tool(serial=True)
    async def first() -> str:
        """Runs while steering arrives."""
        holder["agent"].emit_external_event(steer("Inspect another file."), config=AgentRunConfig("s"))  # type: ignore[attr-defined]
        await trio.sleep(0)
        return "first finished"

    model = ScriptedModel([asks(call("1", "first"), call("2", "step", n=2), call("3", "step", n=3)), AssistantMessage("ok")])
    client, _ = await make(model, tools=[first, step])
    holder["agent"] = client.agent
    names = [event.name async for event in client.stream("go", config=AgentRunConfig("s"))]
    assert names.count("tool_completed") == 1
    assert names.count("tool_skipped") == 2
    assert model.requests[1].messages[-4:] == (
        ToolMessage("1", "first", "first finished"),
        ToolMessage("2", "step", SKIPPED, ToolStatus.SKIPPED),
        ToolMessage("3", "step", SKIPPED, ToolStatus.SKIPPED),
        UserMessage("Inspect another file."),
    )


async def test_after_turn_sees_the_steering_message_already_appended() -> None:
    seen: list[str] = []

    class Turns(AgentExtension):
        async def after_turn(self, context, result):  # type: ignore[no-untyped-def]
            seen.append(context.messages[-1].role)

    holder: dict[str, object] = {}

    def respond(request: ModelRequest) -> AssistantMessage:
        holder["agent"].emit_external_event(steer("change of plan"), config=AgentRunConfig())  # type: ignore[attr-defined]
        return asks(call("a", "step", n=1))

    model = ScriptedModel([respond, AssistantMessage("ok")])
    client, _ = await make(model, tools=[step], extensions=[Turns()])
    holder["agent"] = client.agent
    await client.run("go")
    assert seen == ["user", "assistant"]


async def test_no_running_request_means_steering_is_refused() -> None:
    client, _ = await make(ScriptedModel([AssistantMessage("ok")]))
    assert client.agent.emit_external_event(steer("hello?"), config=AgentRunConfig("s")) == []
    await client.run("go", config=AgentRunConfig("s"))
    assert client.agent.emit_external_event(steer("late"), config=AgentRunConfig("s")) == []


@pytest.mark.parametrize("payload", [{}, {"content": ""}, {"content": 3}])
async def test_malformed_steering_is_refused(payload: dict[str, object]) -> None:
    gate = trio.Event()

    @tool
    async def hold() -> str:
        """Hold."""
        await gate.wait()
        return "held"

    client, steering = await make(ScriptedModel([asks(call("h", "hold")), AssistantMessage("ok")]), tools=[hold])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run, "go")
        await trio.testing.wait_all_tasks_blocked()
        event = ExternalEvent("steering_message", payload)
        assert client.agent.emit_external_event(event, config=AgentRunConfig()) == []
        gate.set()


async def test_sessions_and_request_ids_route_independently() -> None:
    gates = {"a": trio.Event(), "b": trio.Event()}

    @tool
    async def hold(session: str) -> str:
        """Hold until released."""
        await gates[session].wait()
        return "held"

    def script(request: ModelRequest) -> AssistantMessage:
        user = [m for m in request.messages if isinstance(m, UserMessage)]
        if len(user) == 1:
            return asks(call("h", "hold", session=user[0].text))
        return AssistantMessage("answered: " + user[-1].text)

    model = ScriptedModel([script], repeat_last=True)
    client, steering = await make(model, tools=[hold])
    results: dict[str, str] = {}

    async def run(session: str) -> None:
        answer = await client.run(session, config=AgentRunConfig(session, request_id=f"req-{session}"))
        results[session] = answer.content

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "a")
        nursery.start_soon(run, "b")
        await trio.testing.wait_all_tasks_blocked()
        agent = client.agent
        assert agent.emit_external_event(steer("to a, wrong request"), config=AgentRunConfig("a", "req-b")) == []
        assert agent.emit_external_event(steer("to a"), config=AgentRunConfig("a", "req-a")) == ["SteeringExtension"]
        assert agent.emit_external_event(steer("to b"), config=AgentRunConfig("b")) == ["SteeringExtension"]
        assert agent.emit_external_event(steer("to c"), config=AgentRunConfig("c")) == []
        gates["a"].set()
        gates["b"].set()
    assert results == {"a": "answered: to a", "b": "answered: to b"}


async def test_typed_multimodal_steering_through_publish() -> None:
    picture = UserMessage((TextPart("Look at this instead."), ImagePart(data=b"\x89PNG", media_type="image/png")))

    class Camera(AgentExtension):
        async def after_tool(self, context, call, result, error):  # type: ignore[no-untyped-def]
            await context.publish(SteeringMessageEvent(picture))

    model = ScriptedModel([asks(call("a", "step", n=1), call("b", "step", n=2)), AssistantMessage("I see it.")])
    client, _ = await make(model, tools=[step], extensions=[Camera()])
    await client.run("go")
    assert model.requests[1].messages[-1] == picture
    assert model.requests[1].messages[-2] == ToolMessage("b", "step", SKIPPED, ToolStatus.SKIPPED)


async def test_internal_messages_wait_until_steering_is_answered() -> None:
    holder: dict[str, object] = {}

    class Background(AgentExtension):
        async def after_model(self, context, response):  # type: ignore[no-untyped-def]
            if not context.state.get("queued"):
                context.state["queued"] = True
                context.queue_internal_message(UserMessage("background job finished"))

    def first(request: ModelRequest) -> AssistantMessage:
        holder["agent"].emit_external_event(steer("urgent"), config=AgentRunConfig())  # type: ignore[attr-defined]
        return AssistantMessage("first answer")

    model = ScriptedModel([first, AssistantMessage("steering answered"), AssistantMessage("internal answered")])
    client, _ = await make(model, extensions=[Background()])
    holder["agent"] = client.agent
    result = await client.run("go")
    assert result.content == "internal answered"
    assert [m.text for m in model.requests[1].messages if isinstance(m, UserMessage)] == ["go", "urgent"]
    assert [m.text for m in model.requests[2].messages if isinstance(m, UserMessage)] == [
        "go",
        "urgent",
        "background job finished",
    ]


async def test_steering_resets_the_iteration_budget() -> None:
    holder: dict[str, object] = {}

    def first(request: ModelRequest) -> AssistantMessage:
        holder["agent"].emit_external_event(steer("new task"), config=AgentRunConfig())  # type: ignore[attr-defined]
        return asks(call("a", "step", n=1))

    model = ScriptedModel([first, asks(call("b", "step", n=2)), AssistantMessage("done")])
    client, _ = await make(model, tools=[step], max_iterations=2)
    holder["agent"] = client.agent
    assert (await client.run("go")).content == "done"
    assert len(model.requests) == 3


async def test_close_clears_routing_after_failure_and_cancellation() -> None:
    class Boom(AgentExtension):
        async def after_model(self, context, response):  # type: ignore[no-untyped-def]
            raise ValueError("boom")

    client, steering = await make(ScriptedModel([AssistantMessage("x")]), extensions=[Boom()])
    with pytest.raises(ValueError):
        await client.run("go")
    assert steering.routed() == []

    @tool
    async def forever() -> str:
        """Never ends."""
        await trio.sleep_forever()
        return ""

    client, steering = await make(ScriptedModel([asks(call("f", "forever"))]), tools=[forever])
    with trio.move_on_after(5) as scope:
        async for event in client.stream("go"):
            if event.name == "tool_started":
                assert client.agent.emit_external_event(steer("queued"), config=AgentRunConfig()) != []
                assert steering.routed()[0][2] == 1
                scope.cancel()
    assert steering.routed() == []


def test_steering_racing_request_completion_is_never_lost_nor_answered_twice() -> None:
    async def main() -> None:
        def final(request: ModelRequest) -> AssistantMessage:
            users = [m.text for m in request.messages if isinstance(m, UserMessage)]
            return AssistantMessage("re: " + users[-1])

        model = ScriptedModel([final], repeat_last=True)
        steering = SteeringExtension()
        rng = random.Random(7)
        accepted_count = refused_count = 0
        for index in range(200):
            session = f"s{index}"
            outcome: list[list[str]] = []
            agent: list[Agent] = []
            go = threading.Event()

            def emitter(session: str = session, delay: float = rng.uniform(0, 0.003)) -> None:
                go.wait()
                time.sleep(delay)
                outcome.append(agent[0].emit_external_event(steer("late"), config=AgentRunConfig(session)))

            thread = threading.Thread(target=emitter)
            thread.start()

            class Release(AgentExtension):
                async def before_model(self, context, request):  # type: ignore[no-untyped-def]
                    go.set()

                async def after_model(self, context, response):  # type: ignore[no-untyped-def]
                    await trio.sleep(0.001)

            client = await create_agent(model, extensions=[steering, Release()])
            agent.append(client.agent)
            await client.run("first", config=AgentRunConfig(session))
            await trio.to_thread.run_sync(thread.join)
            history = client.agent.history.load(session)  # type: ignore[union-attr]
            steering_messages = [m for m in history if isinstance(m, UserMessage) and m.text == "late"]
            answers = [m for m in history if isinstance(m, AssistantMessage) and m.content == "re: late"]
            if outcome == [["SteeringExtension"]]:
                accepted_count += 1
                assert len(steering_messages) == 1
                assert len(answers) == 1
                assert history.index(answers[0]) > history.index(steering_messages[0])
            else:
                assert outcome == [[]]
                assert steering_messages == []
                refused_count += 1
            assert steering.routed() == []
        assert accepted_count > 0
        assert accepted_count + refused_count == 200

    trio.run(main)

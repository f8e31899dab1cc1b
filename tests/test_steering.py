"""SteeringExtension: urgent input replaces the continuation of the current task."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing
from support import asks, call, phases

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ImagePart,
    MaxIterationsExceeded,
    ModelRequest,
    ScriptedModel,
    TextPart,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent, MessageAppendedEvent, ToolSkippedEvent
from orchestrator.extensions.steering import InvalidSteering, SteeringClosed, SteeringExtension, SteeringMessageEvent

SKIPPED = "skipped: new user input arrived before this call ran"
TAKEN = ["SteeringExtension"]


def steer(text: str) -> ExternalEvent:
    return ExternalEvent("steering_message", {"content": text})


def user_texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if isinstance(m, UserMessage)]


@tool(serial=True)
def step(n: int) -> str:
    """A serial step."""
    return f"step {n}"


async def make(model: ScriptedModel, **kwargs: Any) -> tuple[Any, SteeringExtension]:
    steering = SteeringExtension()
    client = await create_agent(model, extensions=[steering, *kwargs.pop("extensions", [])], **kwargs)
    return client, steering


class Emitter:
    """Sends steering through the agent it is later bound to (from inside a script step or tool)."""

    agent: Any = None

    def __call__(self, text: str, config: AgentRunConfig | None = None) -> list[str]:
        taken: list[str] = self.agent.emit_external_event(steer(text), config=config or AgentRunConfig())
        return taken


# interrupts ------------------------------------------------------------------


async def test_steering_during_a_model_call_skips_every_call_of_that_message() -> None:
    emit = Emitter()

    def respond(request: ModelRequest) -> AssistantMessage:
        assert emit("Stop editing; explain first.", AgentRunConfig("s1")) == TAKEN
        return asks(call("a", "step", n=1), call("b", "step", n=2))

    model = ScriptedModel([respond, AssistantMessage("Here is the explanation.")])
    client, steering = await make(model, tools=[step])
    emit.agent = client.agent
    result = await client.run("edit the file", config=AgentRunConfig("s1", request_id="r1"))
    assert result.content == "Here is the explanation."
    assert model.requests[1].messages[-4:] == (
        AssistantMessage("", (call("a", "step", n=1), call("b", "step", n=2))),
        ToolMessage("a", "step", SKIPPED, ToolStatus.SKIPPED),
        ToolMessage("b", "step", SKIPPED, ToolStatus.SKIPPED),
        UserMessage("Stop editing; explain first."),
    )
    assert [s.trigger for s in client.transitions("s1") if s.region == "phase"].count("steer") == 1
    assert emit("late", AgentRunConfig("s1")) == []
    assert emit("late", AgentRunConfig("s1", request_id="r1")) == []
    assert steering._inboxes == {}


async def test_steering_during_a_batch_lets_the_running_call_finish_and_skips_the_rest() -> None:
    emit = Emitter()
    ran: list[str] = []

    @tool(serial=True)
    async def first() -> str:
        """Runs while steering arrives."""
        ran.append("first")
        assert emit("Inspect another file.", AgentRunConfig("s")) == TAKEN
        await trio.lowlevel.checkpoint()
        return "first finished"

    @tool(serial=True)
    def later(n: int) -> str:
        """Must never run once steering arrived."""
        ran.append(f"later {n}")
        return "ran"

    calls = (call("1", "first"), call("2", "later", n=2), call("3", "later", n=3))
    model = ScriptedModel([asks(*calls), AssistantMessage("ok")])
    client, _ = await make(model, tools=[first, later])
    emit.agent = client.agent
    events: list[AgentEvent] = [event async for event in client.stream("go", config=AgentRunConfig("s"))]
    assert ran == ["first"]
    names = [event.name for event in events]
    assert names.count("tool_started") == 1
    assert names.count("tool_completed") == 1
    skipped = [event for event in events if isinstance(event, ToolSkippedEvent)]
    assert [(e.call, e.result) for e in skipped] == [
        (calls[1], ToolMessage("2", "later", SKIPPED, ToolStatus.SKIPPED)),
        (calls[2], ToolMessage("3", "later", SKIPPED, ToolStatus.SKIPPED)),
    ]
    assert len(model.requests) == 2
    assert model.requests[1].messages[-4:] == (
        ToolMessage("1", "first", "first finished"),
        ToolMessage("2", "later", SKIPPED, ToolStatus.SKIPPED),
        ToolMessage("3", "later", SKIPPED, ToolStatus.SKIPPED),
        UserMessage("Inspect another file."),
    )
    walk = phases(events)
    steered = walk.index(("awaiting_tool", "steer", "steering_interrupt"))
    assert walk[steered + 1 : steered + 3] == [
        ("steering_interrupt", "settle_turn", "turn_settled"),
        ("turn_settled", "request_model", "awaiting_model"),
    ]


async def test_after_turn_runs_once_the_skipped_results_and_the_steering_are_appended() -> None:
    seen: list[tuple[Any, ...]] = []

    class Turns(AgentExtension):
        async def after_turn(self, context, result):  # type: ignore[no-untyped-def]
            seen.append(context.messages[-2:])

    emit = Emitter()

    def respond(request: ModelRequest) -> AssistantMessage:
        emit("change of plan")
        return asks(call("a", "step", n=1))

    model = ScriptedModel([respond, AssistantMessage("ok")])
    client, _ = await make(model, tools=[step], extensions=[Turns()])
    emit.agent = client.agent
    await client.run("go")
    assert seen == [
        (ToolMessage("a", "step", SKIPPED, ToolStatus.SKIPPED), UserMessage("change of plan")),
        (UserMessage("change of plan"), AssistantMessage("ok")),
    ]


async def test_steering_during_a_final_answer_starts_a_steering_turn() -> None:
    emit = Emitter()

    def respond(request: ModelRequest) -> AssistantMessage:
        emit("one more thing")
        return AssistantMessage("done")

    model = ScriptedModel([respond, AssistantMessage("about that thing")])
    client, _ = await make(model)
    emit.agent = client.agent
    assert (await client.run("go")).content == "about that thing"
    assert model.requests[1].messages[-2:] == (AssistantMessage("done"), UserMessage("one more thing"))
    assert ("answered", "steer", "steering_interrupt") in [
        (s.source, s.trigger, s.dest) for s in client.transitions("default")
    ]


async def test_several_queued_messages_are_answered_one_at_a_time_in_order() -> None:
    emit = Emitter()

    def respond(request: ModelRequest) -> AssistantMessage:
        assert emit("first") == TAKEN
        assert emit("second") == TAKEN
        return AssistantMessage("initial")

    def echo(request: ModelRequest) -> AssistantMessage:
        return AssistantMessage("re: " + user_texts(request)[-1])

    model = ScriptedModel([respond, echo], repeat_last=True)
    client, _ = await make(model)
    emit.agent = client.agent
    assert (await client.run("go")).content == "re: second"
    assert [user_texts(r) for r in model.requests] == [["go"], ["go", "first"], ["go", "first", "second"]]


# routing -----------------------------------------------------------------------


async def test_no_running_request_means_steering_is_refused() -> None:
    client, _ = await make(ScriptedModel([AssistantMessage("ok")]))
    assert client.agent.emit_external_event(steer("hello?"), config=AgentRunConfig("s")) == []
    await client.run("go", config=AgentRunConfig("s"))
    assert client.agent.emit_external_event(steer("late"), config=AgentRunConfig("s")) == []


@pytest.mark.parametrize("payload", [{}, {"content": ""}, {"content": "  "}, {"content": 3}, {"text": "hi"}])
async def test_malformed_steering_is_refused(payload: dict[str, object]) -> None:
    gate = trio.Event()

    @tool
    async def hold() -> str:
        """Hold."""
        await gate.wait()
        return "held"

    model = ScriptedModel([asks(call("h", "hold")), AssistantMessage("ok")])
    client, _ = await make(model, tools=[hold])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run, "go")
        await trio.testing.wait_all_tasks_blocked()
        event = ExternalEvent("steering_message", payload)
        assert client.agent.emit_external_event(event, config=AgentRunConfig()) == []
        gate.set()
    assert user_texts(model.requests[1]) == ["go"]


async def test_sessions_and_request_ids_route_independently() -> None:
    gates = {"a": trio.Event(), "b": trio.Event()}

    @tool
    async def hold(session: str) -> str:
        """Hold until released."""
        await gates[session].wait()
        return "held"

    def script(request: ModelRequest) -> AssistantMessage:
        user = user_texts(request)
        if len(user) == 1:
            return asks(call("h", "hold", session=user[0]))
        return AssistantMessage("answered: " + ", ".join(user[1:]))

    model = ScriptedModel([script], repeat_last=True)
    client, _ = await make(model, tools=[hold])
    results: dict[str, str] = {}

    async def run(session: str) -> None:
        answer = await client.run(session, config=AgentRunConfig(session, request_id=f"req-{session}"))
        results[session] = answer.content

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "a")
        nursery.start_soon(run, "b")
        await trio.testing.wait_all_tasks_blocked()
        agent = client.agent
        assert agent.emit_external_event(steer("x"), config=AgentRunConfig("a", "req-b")) == []
        assert agent.emit_external_event(steer("x"), config=AgentRunConfig("a", "req-zz")) == []
        assert agent.emit_external_event(steer("to a"), config=AgentRunConfig("a", "req-a")) == TAKEN
        assert agent.emit_external_event(steer("to b"), config=AgentRunConfig("b")) == TAKEN
        assert agent.emit_external_event(steer("to c"), config=AgentRunConfig("c")) == []
        gates["a"].set()
        gates["b"].set()
    assert results == {"a": "answered: to a", "b": "answered: to b"}


# typed input -------------------------------------------------------------------


async def test_typed_multimodal_steering_through_publish() -> None:
    picture = UserMessage((TextPart("Look at this instead."), ImagePart(data=b"\x89PNG", media_type="image/png")))

    class Camera(AgentExtension):
        async def after_tool(self, context, call, result, error):  # type: ignore[no-untyped-def]
            await context.publish(SteeringMessageEvent(picture))

    model = ScriptedModel([asks(call("a", "step", n=1), call("b", "step", n=2)), AssistantMessage("I see it.")])
    client, _ = await make(model, tools=[step], extensions=[Camera()])
    await client.run("go")
    assert model.requests[1].messages[-3:] == (
        ToolMessage("a", "step", "step 1"),
        ToolMessage("b", "step", SKIPPED, ToolStatus.SKIPPED),
        picture,
    )


async def test_publishing_after_the_inbox_closed_raises() -> None:
    outcomes: list[str] = []

    class Late(AgentExtension):
        async def after_run(self, context, result):  # type: ignore[no-untyped-def]
            try:
                await context.publish(SteeringMessageEvent(UserMessage("too late")))
            except SteeringClosed:
                outcomes.append("refused")

    model = ScriptedModel([AssistantMessage("ok")])
    client, _ = await make(model, extensions=[Late()])
    assert (await client.run("go")).content == "ok"
    assert outcomes == ["refused"]
    assert len(model.requests) == 1


async def test_publishing_while_the_request_ends_or_after_it_ended_raises() -> None:
    outcomes: list[str] = []
    contexts: list[Any] = []

    class Late(AgentExtension):
        async def on_event(self, context, event):  # type: ignore[no-untyped-def]
            if event.name == "run_completed":
                contexts.append(context)
                try:
                    await context.publish(SteeringMessageEvent(UserMessage("too late")))
                except SteeringClosed:
                    outcomes.append("refused while ending")

    model = ScriptedModel([AssistantMessage("ok")])
    client, _ = await make(model, extensions=[Late()])
    assert (await client.run("go")).content == "ok"
    with pytest.raises(SteeringClosed):
        await contexts[0].publish(SteeringMessageEvent(UserMessage("after the end")))
    assert outcomes == ["refused while ending"]
    assert len(model.requests) == 1


# internal messages and the budget ----------------------------------------------


async def test_internal_messages_wait_until_steering_is_answered() -> None:
    emit = Emitter()

    class Background(AgentExtension):
        async def after_model(self, context, response):  # type: ignore[no-untyped-def]
            if not context.state.get("queued"):
                context.state["queued"] = True
                context.queue_internal_message(UserMessage("background job finished"))

    def first(request: ModelRequest) -> AssistantMessage:
        emit("urgent")
        return AssistantMessage("first answer")

    model = ScriptedModel([first, AssistantMessage("steering answered"), AssistantMessage("internal answered")])
    client, _ = await make(model, extensions=[Background()])
    emit.agent = client.agent
    result = await client.run("go")
    assert result.content == "internal answered"
    assert [user_texts(r) for r in model.requests] == [
        ["go"],
        ["go", "urgent"],
        ["go", "urgent", "background job finished"],
    ]


async def test_steering_arriving_while_an_internal_message_is_answered_comes_next() -> None:
    emit = Emitter()

    class Background(AgentExtension):
        async def before_run(self, context):  # type: ignore[no-untyped-def]
            context.queue_internal_message(UserMessage("background job finished"))

    def internal_turn(request: ModelRequest) -> AssistantMessage:
        assert emit("urgent") == TAKEN
        return AssistantMessage("about the job")

    model = ScriptedModel([AssistantMessage("hi"), internal_turn, AssistantMessage("about urgent")])
    client, _ = await make(model, extensions=[Background()])
    emit.agent = client.agent
    assert (await client.run("go")).content == "about urgent"
    assert user_texts(model.requests[2]) == ["go", "background job finished", "urgent"]


async def test_steering_resets_the_iteration_budget() -> None:
    def script(emit: Emitter | None) -> list[Any]:
        def first(request: ModelRequest) -> AssistantMessage:
            if emit is not None:
                emit("new task")
            return asks(call("a", "step", n=1))

        return [first, asks(call("b", "step", n=2)), AssistantMessage("done")]

    plain, _ = await make(ScriptedModel(script(None)), tools=[step], max_iterations=2)
    with pytest.raises(MaxIterationsExceeded):
        await plain.run("go")

    emit = Emitter()
    model = ScriptedModel(script(emit))
    client, _ = await make(model, tools=[step], max_iterations=2)
    emit.agent = client.agent
    assert (await client.run("go")).content == "done"
    assert len(model.requests) == 3


# closing -------------------------------------------------------------------------


async def test_close_clears_routing_and_messages_after_failure() -> None:
    emit = Emitter()
    failures = [ValueError("boom")]

    class Boom(AgentExtension):
        async def after_model(self, context, response):  # type: ignore[no-untyped-def]
            if failures:
                assert emit("queued before the failure", AgentRunConfig("s")) == TAKEN
                raise failures.pop()

    model = ScriptedModel([AssistantMessage("x"), AssistantMessage("fresh")])
    client, steering = await make(model, extensions=[Boom()])
    emit.agent = client.agent
    with pytest.raises(ValueError, match="boom"):
        await client.run("go", config=AgentRunConfig("s"))
    assert emit("after", AgentRunConfig("s")) == []
    assert steering._inboxes == {}
    assert (await client.run("again", config=AgentRunConfig("s"))).content == "fresh"
    assert "queued before the failure" not in user_texts(model.requests[1])


async def test_close_clears_routing_and_messages_after_cancellation() -> None:
    @tool
    async def forever() -> str:
        """Never ends."""
        await trio.sleep_forever()
        return ""

    model = ScriptedModel([asks(call("f", "forever")), AssistantMessage("fresh")])
    client, steering = await make(model, tools=[forever])
    with trio.move_on_after(5) as scope:
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "tool_started":
                assert client.agent.emit_external_event(steer("queued"), config=AgentRunConfig("s")) == TAKEN
                scope.cancel()
    assert scope.cancelled_caught
    assert client.state("s") is None
    assert client.agent.emit_external_event(steer("after"), config=AgentRunConfig("s")) == []
    assert steering._inboxes == {}
    assert (await client.run("next", config=AgentRunConfig("s"))).content == "fresh"
    assert "queued" not in user_texts(model.requests[1])


# select_next, directly ---------------------------------------------------------


class FakeContext:
    def __init__(self, session_id: str, request_id: str) -> None:
        self.session_id = session_id
        self.request_id = request_id
        self.agent = SimpleNamespace(inboxes=[])


def test_select_next_returns_steering_without_asking_for_other_input() -> None:
    steering = SteeringExtension()
    context: Any = FakeContext("s", "r")
    steering.open(context)
    assert steering.accept(AgentRunConfig("s"), steer("urgent"))
    asked: list[bool] = []
    assert steering.select_next(context, lambda: asked.append(True) or True) == UserMessage("urgent")
    assert asked == []
    assert steering.take(context) is None
    assert steering.accept(AgentRunConfig("s"), steer("still open"))
    steering.close(context)


def test_select_next_stays_open_while_other_input_is_reserved() -> None:
    steering = SteeringExtension()
    context: Any = FakeContext("s", "r")
    steering.open(context)
    assert steering.select_next(context, lambda: True) is None
    assert steering.accept(AgentRunConfig("s", "r"), steer("during the internal turn"))
    assert steering.take(context) == UserMessage("during the internal turn")
    steering.close(context)
    assert not steering.accept(AgentRunConfig("s", "r"), steer("after close"))


def test_select_next_holds_the_lock_while_reserving_and_then_closes() -> None:
    steering = SteeringExtension()
    context: Any = FakeContext("s", "r")
    steering.open(context)
    racing: list[bool] = []
    racer = threading.Thread(target=lambda: racing.append(steering.accept(AgentRunConfig("s"), steer("racing"))))
    blocked: list[bool] = []

    def reserve() -> bool:
        racer.start()
        racer.join(timeout=0.05)
        blocked.append(racer.is_alive())
        return False

    assert steering.select_next(context, reserve) is None
    racer.join()
    assert blocked == [True]
    assert racing == [False]
    assert steering.take(context) is None
    steering.close(context)


def test_the_probe_an_inbox_opens_with_is_quiet_only_while_nothing_waits() -> None:
    steering = SteeringExtension()
    context: Any = FakeContext("s", "r")
    probe = steering.open(context)
    assert probe.quiet
    assert steering.accept(AgentRunConfig("s"), steer("from outside"))
    assert not probe.quiet
    assert steering.take(context) == UserMessage("from outside")
    assert not probe.quiet, "taken but not announced yet: the next poll must still drain it"
    assert steering.drain_accepted(context) == [UserMessage("from outside")]
    assert probe.quiet
    steering.close(context)


class CountingInbox(AgentExtension):
    """An inbox that gives no probe: the request must ask it at every poll."""

    def __init__(self) -> None:
        self.taken = 0

    def open(self, context: Any) -> None:
        return None

    def close(self, context: Any) -> None:
        return None

    def take(self, context: Any) -> UserMessage | None:
        self.taken += 1
        return None

    def select_next(self, context: Any, reserve_other_input: Any) -> UserMessage | None:
        reserve_other_input()
        return None


async def test_an_inbox_without_a_probe_is_asked_after_every_model_and_tool_call() -> None:
    inbox = CountingInbox()
    model = ScriptedModel([asks(call("a", "step", n=1)), asks(call("b", "step", n=2)), AssistantMessage("done")])
    client = await create_agent(model, tools=[step], extensions=[inbox], steering=False)
    assert (await client.run("go")).content == "done"
    assert inbox.taken == 3 + 2  # after each of the three model calls and the two tool calls


async def test_steering_racing_request_completion_is_never_lost_nor_answered_twice() -> None:
    def echo(request: ModelRequest) -> AssistantMessage:
        return AssistantMessage("re: " + user_texts(request)[-1])

    model = ScriptedModel([echo], repeat_last=True)
    steering = SteeringExtension()
    rng = random.Random(7)
    accepted = refused = 0
    for index in range(200):
        taken, result, history = await _race_one_request(steering, model, f"s{index}", rng.uniform(0, 0.004))
        late = [m for m in history if m == UserMessage("late")]
        answers = [m for m in history if m == AssistantMessage("re: late")]
        if taken == TAKEN:
            accepted += 1
            assert len(late) == 1
            assert len(answers) == 1
            assert history.index(answers[0]) > history.index(late[0])
            assert result == AssistantMessage("re: late")
        else:
            assert taken == []
            assert late == [] and answers == []
            assert result == AssistantMessage("re: first")
            refused += 1
        assert steering._inboxes == {}
    assert accepted > 0
    assert refused > 0


async def _race_one_request(
    steering: SteeringExtension, model: ScriptedModel, session: str, delay: float
) -> tuple[list[str], AssistantMessage, list[Any]]:
    """One request whose steering is sent from a plain thread as the request completes."""
    started = threading.Event()
    outcome: list[list[str]] = []
    emit = Emitter()

    def emitter() -> None:
        started.wait()
        time.sleep(delay)
        outcome.append(emit("late", AgentRunConfig(session)))

    class Release(AgentExtension):
        async def before_model(self, context, request):  # type: ignore[no-untyped-def]
            started.set()

        async def after_model(self, context, response):  # type: ignore[no-untyped-def]
            await trio.sleep(0.001)

        async def after_run(self, context, result):  # type: ignore[no-untyped-def]
            await trio.sleep(0.001)  # widens the window between select_next and close

    client = await create_agent(model, extensions=[steering, Release()])
    emit.agent = client.agent
    thread = threading.Thread(target=emitter)
    thread.start()
    result = await client.run("first", config=AgentRunConfig(session))
    await trio.to_thread.run_sync(thread.join)
    return outcome[0], result, client.agent.history.load(session)


async def test_an_internal_message_queued_while_concluding_is_refused_loudly() -> None:
    from orchestrator import AgentError

    class Late(AgentExtension):
        async def after_run(self, context, result):  # type: ignore[no-untyped-def]
            context.queue_internal_message(UserMessage("too late"))

    client = await create_agent(ScriptedModel([AssistantMessage("done")]), extensions=[Late()])
    with pytest.raises(AgentError, match="can no longer answer an internal message"):
        await client.run("go", config=AgentRunConfig("late"))
    assert client.agent.transitions("late")[-1].dest == "failed"


# in-flight calls, bad input, ambiguous routing, hammering -----------------------


async def test_calls_already_running_in_a_concurrent_batch_finish_and_are_not_skipped() -> None:
    gates = {key: trio.Event() for key in "abc"}
    emit = Emitter()
    appended: list[Any] = []

    @tool
    async def work(key: str) -> str:
        """Runs beside the others."""
        await gates[key].wait()
        return f"done {key}"

    class Watch(AgentExtension):
        async def after_tool(self, context, call, result, error):  # type: ignore[no-untyped-def]
            if call.id == "a":
                assert emit("new plan") == TAKEN

        async def on_event(self, context, event):  # type: ignore[no-untyped-def]
            if isinstance(event, MessageAppendedEvent):
                appended.append(event.message)

        async def after_turn(self, context, result):  # type: ignore[no-untyped-def]
            appended.append("after_turn")

    calls = (call("a", "work", key="a"), call("b", "work", key="b"), call("c", "work", key="c"))
    model = ScriptedModel([asks(*calls), AssistantMessage("ok")])
    client, _ = await make(model, tools=[work], extensions=[Watch()])
    emit.agent = client.agent
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run, "go")
        await trio.testing.wait_all_tasks_blocked()
        gates["a"].set()
        await trio.testing.wait_all_tasks_blocked()
        gates["c"].set()
        await trio.testing.wait_all_tasks_blocked()
        gates["b"].set()
    start = appended.index(asks(*calls)) + 1
    assert appended[start : start + 5] == [  # recorded in call order, whatever order they finished in
        ToolMessage("a", "work", "done a"),
        ToolMessage("b", "work", "done b"),
        ToolMessage("c", "work", "done c"),
        UserMessage("new plan"),
        "after_turn",
    ]
    assert user_texts(model.requests[1]) == ["go", "new plan"]


@pytest.mark.parametrize(
    "message", [UserMessage(""), UserMessage(" \n"), UserMessage(()), UserMessage((TextPart(""),))]
)
async def test_empty_typed_steering_raises_invalid_steering(message: UserMessage) -> None:
    outcomes: list[str] = []

    class Publisher(AgentExtension):
        async def before_run(self, context):  # type: ignore[no-untyped-def]
            try:
                await context.publish(SteeringMessageEvent(message))
            except InvalidSteering as refused:
                outcomes.append(str(refused))

    model = ScriptedModel([AssistantMessage("ok"), AssistantMessage("should not run")])
    client, _ = await make(model, extensions=[Publisher()])
    assert (await client.run("go")).content == "ok"
    assert outcomes == ["steering needs text or an image; the message is empty"]
    assert len(model.requests) == 1


async def test_an_image_alone_is_valid_typed_steering() -> None:
    picture = UserMessage((ImagePart(url="https://example.test/a.png"),))

    class Publisher(AgentExtension):
        async def before_run(self, context):  # type: ignore[no-untyped-def]
            await context.publish(SteeringMessageEvent(picture))

    model = ScriptedModel([AssistantMessage("first"), AssistantMessage("a picture")])
    client, _ = await make(model, extensions=[Publisher()])
    assert (await client.run("go")).content == "a picture"
    assert model.requests[1].messages[-1] == picture


async def test_a_typed_message_sent_from_a_thread_as_an_external_event() -> None:
    picture = UserMessage((TextPart("This one."), ImagePart(data=b"\x89PNG")))
    gate = trio.Event()
    replies: list[list[str]] = []

    @tool
    async def hold() -> str:
        """Hold until the thread has sent its messages."""
        await gate.wait()
        return "held"

    model = ScriptedModel([asks(call("h", "hold")), AssistantMessage("seen")])
    client, _ = await make(model, tools=[hold])

    def sender() -> None:
        for payload in ({"message": UserMessage("")}, {"message": "text is not a UserMessage"}, {"message": picture}):
            event = ExternalEvent("steering_message", payload)
            replies.append(client.agent.emit_external_event(event, config=AgentRunConfig("s")))

    async def run() -> None:
        await client.run("go", config=AgentRunConfig("s"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        await trio.to_thread.run_sync(sender)
        gate.set()
    assert replies == [[], [], TAKEN]
    assert model.requests[1].messages[-1] == picture


async def test_a_shared_instance_refuses_a_session_it_cannot_route_unambiguously() -> None:
    steering = SteeringExtension()
    gate = trio.Event()

    @tool
    async def hold() -> str:
        """Hold."""
        await gate.wait()
        return "held"

    def script(tag: str) -> ScriptedModel:
        def respond(request: ModelRequest) -> AssistantMessage:
            if not any(isinstance(m, ToolMessage) for m in request.messages):
                return asks(call("h", "hold"))
            return AssistantMessage(f"{tag}: " + ", ".join(user_texts(request)))

        return ScriptedModel([respond], repeat_last=True)

    first = await create_agent(script("one"), extensions=[steering], tools=[hold])
    second = await create_agent(script("two"), extensions=[steering], tools=[hold])
    results: dict[str, str] = {}

    async def run(client: Any, tag: str) -> None:
        results[tag] = (await client.run("go", config=AgentRunConfig("shared", request_id=tag))).content

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, first, "one")
        nursery.start_soon(run, second, "two")
        await trio.testing.wait_all_tasks_blocked()
        assert second.agent.emit_external_event(steer("which?"), config=AgentRunConfig("shared")) == []
        taken = second.agent.emit_external_event(steer("for two"), config=AgentRunConfig("shared", "two"))
        assert taken == TAKEN
        gate.set()
    assert results == {"one": "one: go", "two": "two: go, for two"}


async def test_two_steering_extensions_on_one_agent_are_refused_when_it_is_made() -> None:
    other = SteeringExtension()
    other.name = "MoreSteering"
    with pytest.raises(ValueError, match="an Agent takes one SteeringExtension"):
        await create_agent(ScriptedModel([AssistantMessage("never")]), extensions=[SteeringExtension(), other])


async def test_internal_messages_queued_during_steering_wait_for_it_without_a_quota() -> None:
    emit = Emitter()

    class Background(AgentExtension):
        async def after_tool(self, context, call, result, error):  # type: ignore[no-untyped-def]
            assert emit("urgent") == TAKEN
            for index in range(30):
                context.queue_internal_message(UserMessage(f"job {index} finished"))

    def echo(request: ModelRequest) -> AssistantMessage:
        return AssistantMessage("re: " + user_texts(request)[-1])

    model = ScriptedModel([asks(call("a", "step", n=1)), echo], repeat_last=True)
    client, _ = await make(model, tools=[step], extensions=[Background()], max_iterations=1)
    emit.agent = client.agent
    assert (await client.run("go")).content == "re: job 29 finished"
    assert [user_texts(r)[-1] for r in model.requests] == ["go", "urgent", *[f"job {i} finished" for i in range(30)]]


async def test_bursts_of_steering_from_a_thread_racing_completion_are_each_answered_once() -> None:
    steering = SteeringExtension()
    rng = random.Random(11)
    accepted = refused = 0
    for index in range(300):
        sent, result, history = await _burst_one_request(steering, rng, f"burst{index}")
        taken = [text for text, reply in sent if reply == TAKEN]
        for text, reply in sent:
            asked, answered = UserMessage(text), AssistantMessage("re: " + text)
            if reply == TAKEN:
                assert history.count(asked) == 1 and history.count(answered) == 1
                assert history.index(answered) == history.index(asked) + 1
            else:
                assert reply == [] and asked not in history and answered not in history
        assert result == AssistantMessage("re: " + (taken[-1] if taken else "first"))
        assert steering._inboxes == {}
        accepted += len(taken)
        refused += len(sent) - len(taken)
    assert accepted > 0
    assert refused > 0


async def _burst_one_request(
    steering: SteeringExtension, rng: random.Random, session: str
) -> tuple[list[tuple[str, list[str]]], AssistantMessage, list[Any]]:
    """One request; a plain thread sends 1-4 messages around the moment it completes."""

    def echo(request: ModelRequest) -> AssistantMessage:
        return AssistantMessage("re: " + user_texts(request)[-1])

    started = threading.Event()
    sent: list[tuple[str, list[str]]] = []

    class Widen(AgentExtension):
        async def before_model(self, context, request):  # type: ignore[no-untyped-def]
            started.set()

        async def after_model(self, context, response):  # type: ignore[no-untyped-def]
            await trio.sleep(rng.choice([0, 0.0005]))

        async def after_run(self, context, result):  # type: ignore[no-untyped-def]
            await trio.sleep(rng.choice([0, 0.0005]))  # widens the window between select_next and close

    client = await create_agent(ScriptedModel([echo], repeat_last=True), extensions=[steering, Widen()])
    count, delay = rng.randint(1, 4), rng.uniform(0, 0.003)

    def burst() -> None:
        started.wait()
        time.sleep(delay)
        for k in range(count):
            sent.append((f"m{k}", client.agent.emit_external_event(steer(f"m{k}"), config=AgentRunConfig(session))))

    thread = threading.Thread(target=burst)
    thread.start()
    result = await client.run("first", config=AgentRunConfig(session))
    await trio.to_thread.run_sync(thread.join)
    return sent, result, client.agent.history.load(session)

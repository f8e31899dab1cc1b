"""Steering as an agent's own inbox, and the events a UI follows it by: steering_accepted, steering_applied."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from support import asks, call

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    ModelRequest,
    ScriptedModel,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.agent import Agent
from orchestrator.events import AgentEvent, SteeringAcceptedEvent, SteeringAppliedEvent
from orchestrator.extensions.steering import SteeringExtension, SteeringMessageEvent


def steer(text: str) -> ExternalEvent:
    return ExternalEvent("steering_message", {"content": text})


@tool(serial=True)
def step(n: int) -> str:
    """A serial step."""
    return f"step {n}"


# the agent's own inbox -------------------------------------------------------


async def test_an_agent_steers_without_registering_anything() -> None:
    taken: list[list[str]] = []
    holder: dict[str, Any] = {}

    def respond(request: ModelRequest) -> AssistantMessage:
        taken.append(holder["client"].agent.emit_external_event(steer("explain first"), config=AgentRunConfig("s1")))
        return asks(call("a", "step", n=1))

    model = ScriptedModel([respond, AssistantMessage("explained")])
    client = await create_agent(model, tools=[step])
    holder["client"] = client
    assert [type(e) for e in client.agent.extensions] == [SteeringExtension]
    assert (await client.run("edit", config=AgentRunConfig("s1"))).content == "explained"
    assert taken == [["SteeringExtension"]]
    assert model.requests[1].messages[-1] == UserMessage("explain first")


async def test_an_explicit_steering_extension_replaces_the_default() -> None:
    mine = SteeringExtension()
    client = await create_agent(ScriptedModel([]), extensions=[mine])
    assert [e for e in client.agent.extensions if isinstance(e, SteeringExtension)] == [mine]
    assert client.agent.inboxes == [mine]
    renamed = SteeringExtension()
    renamed.name = "urgent"
    other = await create_agent(ScriptedModel([]), extensions=[renamed])
    assert [e.name for e in other.agent.extensions] == ["urgent"]


async def test_steering_false_opts_out_and_steering_is_refused_with_a_reason() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("ok")]), steering=False)
    assert client.agent.extensions == [] and client.agent.inboxes == []
    delivery = client.deliver(steer("stop"), config=AgentRunConfig("s1"))
    assert not delivery and delivery.reason == "no extension takes 'steering_message' events"
    with pytest.raises(ValueError, match="steering=False"):
        Agent(ScriptedModel([]), extensions=[SteeringExtension()], steering=False)


async def test_the_default_inbox_does_not_make_unwatched_requests_build_events() -> None:
    built: list[str] = []

    class Counting(SteeringExtension):
        async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
            built.append(event.name)
            await super().on_event(context, event)

    client = await create_agent(ScriptedModel([AssistantMessage("a b c")], repeat_last=True), extensions=[Counting()])
    await client.run("go")
    assert built == []
    run_events = [e.name async for e in client.stream("go")]
    assert "text_delta" in run_events and built == []


# events ------------------------------------------------------------------------


async def test_steering_from_outside_is_accepted_then_applied_with_the_calls_it_skipped() -> None:
    holder: dict[str, Any] = {}

    def respond(request: ModelRequest) -> AssistantMessage:
        assert holder["client"].deliver(steer("stop; explain"), config=AgentRunConfig("s1"))
        return asks(call("a", "step", n=1), call("b", "step", n=2), text="editing")

    model = ScriptedModel([respond, AssistantMessage("explained")])
    client = await create_agent(model, tools=[step])
    holder["client"] = client
    with trio.fail_after(10):
        events = [e async for e in client.stream("edit", config=AgentRunConfig("s1", request_id="r1"))]
    names = [e.name for e in events if e.name != "transition"]
    accepted = names.index("steering_accepted")
    assert names[names.index("model_completed") : accepted + 1] == ["model_completed", "steering_accepted"]
    assert names[accepted + 1 :] == [
        "tool_skipped",
        "tool_skipped",
        "steering_applied",
        "model_started",
        "text_delta",
        "model_completed",
        "run_completed",
    ]
    [taken] = [e for e in events if isinstance(e, SteeringAcceptedEvent)]
    assert (taken.message, taken.source) == (UserMessage("stop; explain"), "external")
    [applied] = [e for e in events if isinstance(e, SteeringAppliedEvent)]
    assert applied.message == UserMessage("stop; explain")
    assert applied.skipped_call_ids == ("a", "b")
    assert applied.iteration == 1
    assert taken.seq < applied.seq
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_steering_during_a_tool_call_skips_only_the_calls_that_did_not_run() -> None:
    holder: dict[str, Any] = {}

    @tool(serial=True)
    def first() -> str:
        """Runs while steering arrives."""
        assert holder["client"].deliver(steer("look elsewhere"), config=AgentRunConfig("s"))
        return "done"

    model = ScriptedModel([asks(call("1", "first"), call("2", "step", n=2)), AssistantMessage("ok")])
    client = await create_agent(model, tools=[first, step])
    holder["client"] = client
    with trio.fail_after(10):
        events = [e async for e in client.stream("go", config=AgentRunConfig("s"))]
    names = [e.name for e in events if e.name != "transition"]
    assert names[names.index("tool_started") :][:5] == [
        "tool_started",
        "tool_completed",
        "steering_accepted",
        "tool_skipped",
        "steering_applied",
    ]
    [applied] = [e for e in events if isinstance(e, SteeringAppliedEvent)]
    assert applied.skipped_call_ids == ("2",)


async def test_steering_after_a_final_answer_skips_nothing() -> None:
    holder: dict[str, Any] = {}

    def respond(request: ModelRequest) -> AssistantMessage:
        holder["client"].deliver(steer("one more thing"), config=AgentRunConfig())
        return AssistantMessage("done")

    model = ScriptedModel([respond, AssistantMessage("about that")])
    client = await create_agent(model)
    holder["client"] = client
    with trio.fail_after(10):
        events = [e async for e in client.stream("go")]
    steering = [e for e in events if isinstance(e, (SteeringAcceptedEvent, SteeringAppliedEvent))]
    assert [e.name for e in steering] == ["steering_accepted", "steering_applied"]
    assert steering[1] == SteeringAppliedEvent(
        session_id="default",
        request_id=steering[1].request_id,
        seq=steering[1].seq,
        ts=steering[1].ts,
        message=UserMessage("one more thing"),
        skipped_call_ids=(),
        iteration=1,
    )


async def test_typed_steering_published_by_an_extension_is_accepted_from_the_extension() -> None:
    class Nudge(AgentExtension):
        async def after_model(self, context: AgentRunContext, response: AssistantMessage) -> None:
            if response.content == "first":
                await context.publish(SteeringMessageEvent(message=UserMessage("nudged")))

    model = ScriptedModel([AssistantMessage("first"), AssistantMessage("second")])
    client = await create_agent(model, extensions=[Nudge()])
    with trio.fail_after(10):
        events = [e async for e in client.stream("go")]
    names = [e.name for e in events if e.name != "transition"]
    assert names.count("steering_accepted") == 1 and names.count("steering_applied") == 1
    assert names.index("model_completed") < names.index("steering_accepted") < names.index("steering_applied")
    [taken] = [e for e in events if isinstance(e, SteeringAcceptedEvent)]
    assert (taken.message, taken.source) == (UserMessage("nudged"), "extension")
    assert model.requests[1].messages[-1] == UserMessage("nudged")


async def test_several_messages_each_get_their_own_events_in_order() -> None:
    holder: dict[str, Any] = {}

    def respond(request: ModelRequest) -> AssistantMessage:
        for text in ("first", "second"):
            assert holder["client"].deliver(steer(text), config=AgentRunConfig())
        return AssistantMessage("initial")

    def echo(request: ModelRequest) -> AssistantMessage:
        last = [m for m in request.messages if isinstance(m, UserMessage)][-1]
        return AssistantMessage("re: " + last.text)

    client = await create_agent(ScriptedModel([respond, echo], repeat_last=True))
    holder["client"] = client
    with trio.fail_after(10):
        events = [e async for e in client.stream("go")]
    steering = [
        (e.name, e.message.text) for e in events if isinstance(e, (SteeringAcceptedEvent, SteeringAppliedEvent))
    ]
    assert steering == [
        ("steering_accepted", "first"),
        ("steering_accepted", "second"),
        ("steering_applied", "first"),
        ("steering_applied", "second"),
    ]

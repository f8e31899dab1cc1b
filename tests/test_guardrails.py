"""Guardrails: input checks before the first model call, output checks on the final answer, as machine edges."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import trio
from support import asks, call

from orchestrator import (
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    GuardrailResult,
    GuardrailsExtension,
    InputGuardrailTripped,
    OutputGuardrailTripped,
    OutputType,
    RequestDeadlineExceeded,
    ScriptedModel,
    UserMessage,
    create_agent,
    input_guardrail,
    output_guardrail,
    tool,
)
from orchestrator.events import AgentEvent
from orchestrator.extensions.guardrails import Guardrail


@input_guardrail
def no_passwords(context: AgentRunContext, message: UserMessage) -> GuardrailResult:
    return GuardrailResult(tripwire="password" in message.content, reason="asks for a password", info={"word": 1})


@output_guardrail
async def no_insults(context: AgentRunContext, answer: AssistantMessage) -> GuardrailResult:
    return GuardrailResult(tripwire="stupid" in answer.content, reason="the answer is rude")


@tool
async def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


async def collect(client: Any, text: str, session_id: str) -> tuple[list[AgentEvent], BaseException | None]:
    events: list[AgentEvent] = []
    try:
        async for event in client.stream(text, config=AgentRunConfig(session_id)):
            events.append(event)
    except Exception as error:
        return events, error
    return events, None


def names(events: list[AgentEvent]) -> list[str]:
    return [e.name for e in events]


# tripwires ----------------------------------------------------------------------


async def test_an_input_tripwire_ends_the_request_before_any_model_call() -> None:
    model = ScriptedModel([AssistantMessage("never")])
    client = await create_agent(model, extensions=[GuardrailsExtension([no_passwords, no_insults])])
    events, error = await collect(client, "what is the admin password?", "s")
    assert isinstance(error, InputGuardrailTripped)
    assert (error.guardrail, error.reason, error.info) == ("no_passwords", "asks for a password", {"word": 1})
    assert str(error) == "input guardrail 'no_passwords' tripped: asks for a password"
    assert model.requests == []
    tripped = [e for e in events if e.name == "guardrail_tripped"]
    assert [(e.guardrail, e.stage, e.reason) for e in tripped] == [  # type: ignore[attr-defined]
        ("no_passwords", "input", "asks for a password")
    ]
    assert names(events)[-1] == "run_failed" and "model_started" not in names(events)
    assert [(s.source, s.trigger, s.dest) for s in client.transitions("s", region="phase")] == [
        ("idle", "start", "setup"),
        ("setup", "check_input", "checking_input"),
        ("checking_input", "guardrail_tripped", "failed"),
    ]


async def test_input_that_passes_goes_on_to_the_model() -> None:
    model = ScriptedModel([AssistantMessage("hello")])
    client = await create_agent(model, extensions=[GuardrailsExtension([no_passwords])])
    assert (await client.run("hi", config=AgentRunConfig("s"))).content == "hello"
    assert ("checking_input", "request_model", "awaiting_model") in phases_of(client, "s")
    # Without output guardrails, the answer is not held: no checking_output.
    assert all("checking_output" not in edge for edge in phases_of(client, "s"))


async def test_an_output_tripwire_fails_the_request_after_the_answer() -> None:
    model = ScriptedModel([AssistantMessage("that is a stupid question")])
    client = await create_agent(model, extensions=[GuardrailsExtension([no_passwords, no_insults])])
    events, error = await collect(client, "why?", "s")
    assert isinstance(error, OutputGuardrailTripped)
    assert (error.guardrail, error.reason) == ("no_insults", "the answer is rude")
    assert len(model.requests) == 1
    assert "run_completed" not in names(events) and names(events)[-1] == "run_failed"
    tripped = [e for e in events if e.name == "guardrail_tripped"]
    assert [(e.guardrail, e.stage) for e in tripped] == [("no_insults", "output")]  # type: ignore[attr-defined]
    assert phases_of(client, "s")[-2:] == [
        ("awaiting_model", "answer", "checking_output"),
        ("checking_output", "guardrail_tripped", "failed"),
    ]


def phases_of(client: Any, session_id: str) -> list[tuple[str, str, str]]:
    return [(s.source, s.trigger, s.dest) for s in client.transitions(session_id, region="phase")]


async def test_guardrail_edges_appear_in_the_phase_transitions_of_a_passing_request() -> None:
    model = ScriptedModel([asks(call("c1", "lookup", topic="tides")), AssistantMessage("high tide at noon")])
    client = await create_agent(model, tools=[lookup], extensions=[GuardrailsExtension([no_passwords, no_insults])])
    assert (await client.run("when is high tide?", config=AgentRunConfig("s"))).content == "high tide at noon"
    assert phases_of(client, "s") == [
        ("idle", "start", "setup"),
        ("setup", "check_input", "checking_input"),
        ("checking_input", "request_model", "awaiting_model"),
        ("awaiting_model", "respond", "awaiting_tool"),
        ("awaiting_tool", "settle_turn", "turn_settled"),
        ("turn_settled", "request_model", "awaiting_model"),
        ("awaiting_model", "answer", "checking_output"),
        ("checking_output", "pass_output", "answered"),
        ("answered", "conclude", "concluding"),
        ("concluding", "complete", "completed"),
    ]


# parallel ------------------------------------------------------------------------


async def test_the_guardrails_of_a_stage_run_at_once() -> None:
    started: list[str] = []
    both_started = trio.Event()

    def meets_the_other(label: str) -> Guardrail[UserMessage]:
        async def check(context: AgentRunContext, message: UserMessage) -> GuardrailResult:
            started.append(label)
            if len(started) == 2:
                both_started.set()
            # Run one after the other, neither would see the other start: the request fails instead of hanging.
            with trio.fail_after(5):
                await both_started.wait()
            return GuardrailResult()

        return input_guardrail(name=label)(check)

    model = ScriptedModel([AssistantMessage("fine")])
    client = await create_agent(
        model, extensions=[GuardrailsExtension([meets_the_other("first"), meets_the_other("second")])]
    )
    assert (await client.run("hi", config=AgentRunConfig("s"))).content == "fine"
    assert sorted(started) == ["first", "second"]


async def test_a_tripwire_cancels_the_guardrails_still_running() -> None:
    cancelled: list[str] = []

    @input_guardrail
    async def slow(context: AgentRunContext, message: UserMessage) -> GuardrailResult:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append("slow")
            raise
        return GuardrailResult()

    model = ScriptedModel([AssistantMessage("never")])
    client = await create_agent(model, extensions=[GuardrailsExtension([slow, no_passwords])])
    with trio.fail_after(5):
        with pytest.raises(InputGuardrailTripped, match="no_passwords"):
            await client.run("the password, please", config=AgentRunConfig("s"))
    assert cancelled == ["slow"]


# errors --------------------------------------------------------------------------


async def test_a_raising_input_guardrail_fails_the_request_with_its_error() -> None:
    @input_guardrail
    def broken(context: AgentRunContext, message: UserMessage) -> GuardrailResult:
        raise RuntimeError("classifier unavailable")

    model = ScriptedModel([AssistantMessage("never")])
    client = await create_agent(model, extensions=[GuardrailsExtension([broken])])
    events, error = await collect(client, "hi", "s")
    assert isinstance(error, RuntimeError) and str(error) == "classifier unavailable"
    assert "raised by input guardrail 'broken'" in getattr(error, "__notes__", [])
    assert model.requests == []
    assert names(events)[-1] == "run_failed" and events[-1].error is error  # type: ignore[attr-defined]
    assert phases_of(client, "s")[-1] == ("checking_input", "fail", "failed")


async def test_a_raising_output_guardrail_fails_the_request_with_its_error() -> None:
    @output_guardrail
    async def broken(context: AgentRunContext, answer: AssistantMessage) -> GuardrailResult:
        raise RuntimeError("moderation service down")

    model = ScriptedModel([AssistantMessage("an answer")])
    client = await create_agent(model, extensions=[GuardrailsExtension([broken])])
    with trio.fail_after(5):
        with pytest.raises(RuntimeError, match="moderation service down"):
            await client.run("hi", config=AgentRunConfig("s"))
    assert phases_of(client, "s")[-1] == ("checking_output", "fail", "failed")


async def test_a_guardrail_that_returns_no_result_fails_the_request_with_a_type_error() -> None:
    @input_guardrail
    def forgetful(context: AgentRunContext, message: UserMessage) -> Any:
        return True

    model = ScriptedModel([AssistantMessage("never")])
    client = await create_agent(model, extensions=[GuardrailsExtension([forgetful])])
    with pytest.raises(TypeError, match="guardrail 'forgetful' returned bool, not a GuardrailResult"):
        await client.run("hi", config=AgentRunConfig("s"))


def test_bad_guardrail_lists_are_refused_with_a_reason() -> None:
    with pytest.raises(TypeError, match="made by @input_guardrail or @output_guardrail"):
        GuardrailsExtension([lambda context, message: GuardrailResult()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="repeated: no_passwords"):
        GuardrailsExtension([no_passwords, input_guardrail(name="no_passwords")(no_passwords.function)])
    with pytest.raises(TypeError, match="must be a function"):
        input_guardrail(name="x")("not callable")


# streaming -----------------------------------------------------------------------


async def test_the_answers_text_is_held_until_the_output_guardrails_pass() -> None:
    first = asks(call("c1", "lookup", topic="tides"), text="let me look")
    model = ScriptedModel([first, AssistantMessage("noon today")])
    client = await create_agent(model, tools=[lookup], extensions=[GuardrailsExtension([no_insults])])
    events, error = await collect(client, "when?", "s")
    assert error is None
    order = [
        e.name if e.name != "transition" else e.trigger  # type: ignore[attr-defined]
        for e in events
        if e.name in ("text_delta", "tool_started", "transition")
    ]
    # Text before tool calls is no final answer: it streams before the calls run.
    assert order.index("text_delta") < order.index("tool_started")
    # The answer's text streams only after pass_output, in one delta.
    answer_deltas = [e.text for e in events if e.name == "text_delta"][1:]  # type: ignore[attr-defined]
    assert answer_deltas == ["noon today"]
    assert order[order.index("pass_output") + 1] == "text_delta"
    assert "text_delta" not in order[order.index("answer") : order.index("pass_output")]


async def test_a_tripped_answer_never_streams_as_text() -> None:
    model = ScriptedModel([AssistantMessage("you are stupid")])
    client = await create_agent(model, extensions=[GuardrailsExtension([no_insults])])
    events, error = await collect(client, "hi", "s")
    assert isinstance(error, OutputGuardrailTripped)
    assert [e for e in events if e.name == "text_delta"] == []


async def test_without_output_guardrails_the_answer_streams_word_by_word() -> None:
    model = ScriptedModel([AssistantMessage("noon today")])
    client = await create_agent(model, extensions=[GuardrailsExtension([no_passwords])])
    events, _ = await collect(client, "when?", "s")
    assert [e.text for e in events if e.name == "text_delta"] == ["noon", " today"]  # type: ignore[attr-defined]


# with an output type ---------------------------------------------------------------


async def test_an_answer_that_fits_its_output_type_then_goes_through_the_output_guardrails() -> None:
    @dataclasses.dataclass
    class Forecast:
        hour: int

    seen: list[str] = []

    @output_guardrail
    def daytime(context: AgentRunContext, answer: AssistantMessage) -> GuardrailResult:
        seen.append(answer.content)
        return GuardrailResult(tripwire='"hour": 3' in answer.content, reason="not during the day")

    model = ScriptedModel([AssistantMessage('{"hour": 12}'), AssistantMessage('{"hour": 3}')])
    client = await create_agent(model, extensions=[GuardrailsExtension([daytime])], output_type=Forecast)
    assert (await client.run("when?", config=AgentRunConfig("s"))).output == Forecast(12)  # type: ignore[attr-defined]
    assert ("validating_output", "accept_output", "checking_output") in phases_of(client, "s")
    with pytest.raises(OutputGuardrailTripped, match="not during the day"):
        await client.run("and at night?", config=AgentRunConfig("t"))
    assert seen == ['{"hour": 12}', '{"hour": 3}']
    assert OutputType(Forecast).retries >= 0


async def test_a_guardrail_that_never_returns_is_ended_by_the_requests_deadline() -> None:
    @input_guardrail
    async def stuck(context: AgentRunContext, message: UserMessage) -> GuardrailResult:
        await trio.sleep_forever()
        return GuardrailResult()

    model = ScriptedModel([AssistantMessage("never")])
    client = await create_agent(model, extensions=[GuardrailsExtension([stuck])])
    with trio.fail_after(5):
        with pytest.raises(RequestDeadlineExceeded):
            await client.run("hi", config=AgentRunConfig("s", deadline=0.05))
    assert phases_of(client, "s")[-1] == ("checking_input", "deadline_passed", "failed")
    assert model.requests == []

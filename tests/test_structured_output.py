"""Structured output: the final answer checked against an output type, retried, and sent natively to providers."""

from __future__ import annotations

import dataclasses
import json
from functools import partial
from typing import Any, TypedDict

import attrs
import pytest
import trio
from provider_mock import Server, sse
from support import asks, call, phases

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ScriptedModel,
    ToolMessage,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent
from orchestrator.output import OutputType, OutputValidationError, StructuredAnswer
from orchestrator.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel


@dataclasses.dataclass
class City:
    name: str
    population: int


@attrs.frozen
class Point:
    x: float
    y: float


class Pet(TypedDict):
    name: str
    legs: int


@tool
def census(city: str) -> int:
    """Population of a city."""
    return 700_000


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        (City, '{"name": "Oslo", "population": 700000}', City("Oslo", 700000)),
        (Point, '```json\n{"x": 1, "y": 2.5}\n```', Point(1.0, 2.5)),
        (Pet, '{"name": "Rex", "legs": 4}', {"name": "Rex", "legs": 4}),
        (list[int], "[1, 2, 3]", [1, 2, 3]),
        (
            {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
            '{"ok": true}',
            {"ok": True},
        ),
    ],
)
async def test_the_answer_becomes_the_typed_output_and_keeps_its_text(kind: Any, text: str, value: Any) -> None:
    model = ScriptedModel([AssistantMessage(text)])
    client = await create_agent(model, output_type=kind)
    answer = await client.run("tell me")
    assert isinstance(answer, StructuredAnswer) and isinstance(answer, AssistantMessage)
    assert answer.content == text
    assert answer.output == value
    assert model.requests[0].output is not None and model.requests[0].output.type == kind


async def test_a_pydantic_model_is_an_output_type() -> None:
    pydantic = pytest.importorskip("pydantic", reason="pydantic is not installed")

    class Weather(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        city: str
        celsius: float

    model = ScriptedModel(
        [AssistantMessage('{"city": "Oslo", "celsius": "warm"}'), AssistantMessage('{"city": "Oslo", "celsius": 21}')]
    )
    client = await create_agent(model, output_type=Weather)
    answer = await client.run("weather?")
    assert answer.output == Weather(city="Oslo", celsius=21.0)
    feedback = model.requests[1].messages[-1]
    assert isinstance(feedback, UserMessage)
    expected = "Your answer does not match the required output: at celsius: input should be a valid number"
    assert str(feedback.content).startswith(expected)


async def test_an_answer_that_does_not_fit_goes_back_with_the_reason_and_the_request_goes_on() -> None:
    model = ScriptedModel(
        [
            asks(call("c1", "census", city="Oslo")),
            AssistantMessage("Oslo has about 700k people."),
            AssistantMessage('{"name": "Oslo", "population": "many"}'),
            AssistantMessage('{"name": "Oslo", "population": 700000}'),
        ]
    )
    client = await create_agent(model, tools=[census], output_type=OutputType(City, retries=2))
    events: list[AgentEvent] = []
    answer = None
    async for event in client.stream("How many live in Oslo?"):
        events.append(event)
    answer = events[-1].payload["result"] if events[-1].name == "run_completed" else None
    assert answer is not None and answer.content == '{"name": "Oslo", "population": 700000}'
    feedback = [m for m in model.requests[3].messages if isinstance(m, UserMessage)][1:]
    assert [str(m.content).split(". Answer again")[0] for m in feedback] == [
        "Your answer does not match the required output: "
        "the answer is not JSON (Expecting value: line 1 column 1 (char 0))",
        "Your answer does not match the required output: at population: expected an integer, got 'many'",
    ]
    assert phases(events)[2:] == [
        ("awaiting_model", "respond", "awaiting_tool"),
        ("awaiting_tool", "settle_turn", "turn_settled"),
        ("turn_settled", "request_model", "awaiting_model"),
        ("awaiting_model", "answer", "validating_output"),
        ("validating_output", "retry_output", "turn_settled"),
        ("turn_settled", "request_model", "awaiting_model"),
        ("awaiting_model", "answer", "validating_output"),
        ("validating_output", "retry_output", "turn_settled"),
        ("turn_settled", "request_model", "awaiting_model"),
        ("awaiting_model", "answer", "validating_output"),
        ("validating_output", "accept_output", "answered"),
        ("answered", "conclude", "concluding"),
        ("concluding", "complete", "completed"),
    ]


async def test_after_the_last_retry_the_request_fails_with_the_last_error() -> None:
    model = ScriptedModel([AssistantMessage('{"name": "Oslo"}')], repeat_last=True)
    client = await create_agent(model, output_type=OutputType(City, retries=1))
    with pytest.raises(OutputValidationError) as failed:
        await client.run("Oslo?", config=AgentRunConfig("s"))
    assert (failed.value.error.path, failed.value.error.reason) == ("", "missing required field(s): population")
    assert (failed.value.attempts, failed.value.answer) == (2, '{"name": "Oslo"}')
    assert str(failed.value) == (
        "the answer did not match the output type after 2 attempt(s): missing required field(s): population"
    )
    assert len(model.requests) == 2
    last = client.transitions("s", region="phase")[-1]
    assert (last.source, last.trigger, last.dest) == ("validating_output", "fail", "failed")


async def test_a_run_sets_its_own_output_type_and_a_plain_run_returns_the_plain_message() -> None:
    model = ScriptedModel([AssistantMessage('{"x": 0, "y": 1}'), AssistantMessage("just text")])
    client = await create_agent(model)
    typed = await client.run("point", config=AgentRunConfig("a", output_type=Point))
    assert isinstance(typed, StructuredAnswer) and typed.output == Point(0, 1)
    plain = await client.run("text", config=AgentRunConfig("b"))
    assert type(plain) is AssistantMessage and plain.content == "just text"
    assert model.requests[1].output is None


def test_a_type_without_a_json_schema_is_refused_when_given() -> None:
    with pytest.raises(TypeError, match="no JSON schema for type hint"):
        AgentRunConfig(output_type=complex)
    with pytest.raises(ValueError, match=r"OutputType\.retries"):
        OutputType(City, retries=-1)


# providers -----------------------------------------------------------------------


def _openai_text(text: str) -> str:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return f"data: {json.dumps({'id': 'c', 'object': 'chat.completion.chunk', 'choices': [choice]})}\n\n"

    return chunk({"role": "assistant", "content": text}) + chunk({}, "stop") + "data: [DONE]\n\n"


async def test_openai_chat_sends_the_schema_as_response_format_and_unwraps_a_wrapped_value() -> None:
    server = Server(sse(_openai_text('{"name": "Oslo", "population": 1}')), sse(_openai_text('{"value": [1, 2]}')))
    model = OpenAIChatModel("gpt-4o-mini", api_key="k", client=server.client())
    client = await create_agent(model, output_type=City)
    assert (await client.run("city")).output == City("Oslo", 1)
    numbers = await client.run("numbers", config=AgentRunConfig("n", output_type=list[int]))
    assert (numbers.output, numbers.content) == ([1, 2], "[1, 2]")
    first, second = server.bodies()
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "City", "schema": OutputType(City).schema, "strict": False},
    }
    assert second["response_format"]["json_schema"]["schema"] == {
        "type": "object",
        "properties": {"value": {"type": "array", "items": {"type": "integer"}}},
        "required": ["value"],
        "additionalProperties": False,
    }


def _responses_text(text: str) -> str:
    def event(kind: str, **fields: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"

    item = {"id": "m", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    done = {"id": "r", "object": "response", "status": "completed", "output": [item]}
    return (
        event("response.output_item.added", output_index=0, item={**item, "content": []})
        + event("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta=text)
        + event("response.output_item.done", output_index=0, item=item)
        + event("response.completed", response=done)
    )


async def test_openai_responses_sends_the_schema_as_text_format() -> None:
    server = Server(sse(_responses_text('{"name": "Oslo", "population": 2}')))
    client = await create_agent(
        OpenAIResponsesModel("gpt-5-mini", api_key="k", client=server.client()), output_type=City
    )
    assert (await client.run("city")).output == City("Oslo", 2)
    assert server.bodies()[0]["text"] == {
        "format": {"type": "json_schema", "name": "City", "schema": OutputType(City).schema, "strict": False}
    }


def _gemini_text(text: str) -> str:
    candidate = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0, "finishReason": "STOP"}
    return f"data: {json.dumps({'candidates': [candidate]})}\n\n"


async def test_gemini_sends_the_schema_as_response_json_schema_when_no_tools_are_offered() -> None:
    server = Server(sse(_gemini_text('{"x": 1, "y": 2}')), sse(_gemini_text('{"x": 3, "y": 4}')))
    model = GeminiModel("gemini-2.5-flash", api_key="k", client=server.client())
    plain = await create_agent(model, output_type=Point)
    assert (await plain.run("point")).output == Point(1, 2)
    with_tools = await create_agent(model, output_type=Point, tools=[census])
    assert (await with_tools.run("point")).output == Point(3, 4)
    first, second = server.bodies()
    schema = OutputType(Point).schema
    assert first["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": schema}
    assert "generationConfig" not in second


def _anthropic_event(payload: dict[str, Any]) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n"


def _anthropic_output_call(arguments: dict[str, Any]) -> str:
    message = {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 5}}
    block = {"type": "tool_use", "id": "toolu_1", "name": "final_result", "input": {}}
    delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
    return "".join(
        _anthropic_event(payload)
        for payload in (
            {"type": "message_start", "message": message},
            {"type": "content_block_start", "index": 0, "content_block": block},
            {"type": "content_block_delta", "index": 0, "delta": delta},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
            {"type": "message_stop"},
        )
    )


async def test_anthropic_forces_an_output_tool_whose_input_is_the_answer() -> None:
    server = Server(
        sse(_anthropic_output_call({"name": "Oslo", "population": 3})),
        sse(_anthropic_output_call({"value": ["a", "b"]})),
    )
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", client=server.client(), prompt_caching=False)
    client = await create_agent(model, output_type=City)
    answer = await client.run("city")
    assert (answer.output, json.loads(answer.content), answer.tool_calls) == (
        City("Oslo", 3),
        {"name": "Oslo", "population": 3},
        (),
    )
    tools_client = await create_agent(model, tools=[census], output_type=list[str])
    assert (await tools_client.run("letters")).output == ["a", "b"]
    first, second = server.bodies()
    assert first["tools"] == [
        {
            "name": "final_result",
            "description": "Give the final answer: a City. Call this once, when the answer is ready.",
            "input_schema": OutputType(City).schema,
        }
    ]
    assert first["tool_choice"] == {"type": "tool", "name": "final_result"}
    assert [t["name"] for t in second["tools"]] == ["census", "final_result"]
    assert second["tool_choice"] == {"type": "any"}
    assert second["tools"][1]["input_schema"]["properties"]["value"] == {"type": "array", "items": {"type": "string"}}


async def test_no_tool_message_is_left_for_the_output_tool() -> None:
    server = Server(sse(_anthropic_output_call({"name": "Rome", "population": 4})))
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", client=server.client(), prompt_caching=False)
    client = await create_agent(model, output_type=City)
    await client.run("city", config=AgentRunConfig("r"))
    history = client.agent.history
    assert history is not None
    kept = history.load("r")
    assert not [m for m in kept if isinstance(m, ToolMessage)]
    assert [type(m).__name__ for m in kept] == ["UserMessage", "AssistantMessage"]


async def test_cancelling_while_the_answer_is_checked_cancels_the_request() -> None:
    from orchestrator import AgentExtension
    from orchestrator.events import TransitionEvent

    class Slow(AgentExtension):
        async def on_event(self, context: Any, event: AgentEvent) -> None:
            if isinstance(event, TransitionEvent) and event.dest == "validating_output":
                await trio.sleep_forever()

    client = await create_agent(ScriptedModel([AssistantMessage("{}")]), extensions=[Slow()], output_type=City)
    with trio.move_on_after(5) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(client.run, "city", config=AgentRunConfig("c")))
            while client.state("c") != "validating_output":
                await trio.sleep(0.01)
            scope.cancel()
    last = client.transitions("c", region="phase")[-1]
    assert (last.source, last.trigger, last.dest) == ("validating_output", "cancel", "cancelled")

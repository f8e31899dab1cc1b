"""A tool parameter typed as a dataclass gets a schema, and arguments that do not fit fail the call, not the request."""

from __future__ import annotations

import dataclasses

from orchestrator import AssistantMessage, ScriptedModel, ToolCall, ToolMessage, create_agent, tool


@dataclasses.dataclass
class Span:
    start: int
    end: int


async def test_a_dataclass_parameter_is_converted_and_a_bad_one_fails_its_call_naming_the_field() -> None:
    seen: list[Span] = []

    @tool
    def measure(span: Span) -> int:
        """Length of a span."""
        seen.append(span)
        return span.end - span.start

    model = ScriptedModel(
        [
            AssistantMessage("", (ToolCall("a", "measure", {"span": {"start": 1}}),)),
            AssistantMessage("", (ToolCall("b", "measure", {"span": {"start": 1, "end": 4}}),)),
            AssistantMessage("3"),
        ]
    )
    client = await create_agent(model, tools=[measure])
    assert (await client.run("measure")).content == "3"
    results = [(m.status.value, m.content) for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert results == [
        ("failed", "invalid arguments for measure: span: missing required field(s): end"),
        ("succeeded", "3"),
    ]
    assert seen == [Span(1, 4)]

"""The @tool decorator: schemas from hints and docstrings, validation, injection."""

from __future__ import annotations

from typing import Literal

import pytest

from orchestrator import AgentRunContext, ToolArgumentsError, ToolCall, ToolResult, tool
from orchestrator.tools import validate_arguments


@tool
async def search(query: str, limit: int = 5, mode: Literal["fast", "deep"] = "fast", tags: list[str] | None = None) -> str:
    """Search the notes.

    Longer explanation that stays in the description.

    Args:
        query: what to look for
        limit: how many results,
            at most
        mode: search strategy

    Returns:
        matching notes
    """
    return query


def test_schema_comes_from_hints_defaults_and_docstring() -> None:
    assert search.name == "search"
    assert search.description == "Search the notes.\n\nLonger explanation that stays in the description."
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "description": "how many results, at most", "default": 5},
            "mode": {"enum": ["fast", "deep"], "description": "search strategy", "default": "fast"},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_decorator_options_and_context_injection() -> None:
    @tool(name="renamed", description="custom", serial=True)
    def handler(context: AgentRunContext, path: str, call: ToolCall) -> str:
        return path

    assert (handler.name, handler.description, handler.serial) == ("renamed", "custom", True)
    assert handler.inject == (("context", "context"), ("call", "call"))
    assert list(handler.parameters["properties"]) == ["path"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required argument(s): query"),
        ({"query": 3}, "query: expected a string, got int"),
        ({"query": "q", "limit": True}, "limit: expected an integer"),
        ({"query": "q", "mode": "slow"}, "'slow' is not one of"),
        ({"query": "q", "extra": 1}, "unknown argument(s): extra"),
        ({"query": "q", "tags": ["a", 2]}, "matches none of the allowed types"),
        ([1, 2], "arguments must be an object"),
    ],
)
def test_invalid_arguments_are_refused_with_a_clear_message(arguments: object, message: str) -> None:
    with pytest.raises(ToolArgumentsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_arguments(search.parameters, arguments)


def test_valid_arguments_pass_and_whole_floats_become_integers() -> None:
    values = validate_arguments(search.parameters, {"query": "q", "limit": 2.0, "tags": None})
    assert values == {"query": "q", "limit": 2, "tags": None}


async def test_invoke_runs_sync_and_async_handlers() -> None:
    @tool
    def double(n: int) -> int:
        """Double it."""
        return n * 2

    assert await double.invoke({"n": 4}, {}) == 8
    assert await search.invoke({"query": "x"}, {}) == "x"
    with pytest.raises(ToolArgumentsError):
        await double.invoke({"n": "four"}, {})


def test_unsupported_hints_fail_at_definition_time() -> None:
    with pytest.raises(TypeError, match="no JSON schema"):

        @tool
        def bad(value: complex) -> None:
            """Bad."""


async def test_plain_return_values_reach_the_model_as_readable_text() -> None:
    from orchestrator import AssistantMessage, ScriptedModel, ToolMessage, create_agent

    @tool
    def raw() -> bytes:
        """Bytes."""
        return "héllo".encode()

    @tool
    def mapping() -> dict[str, object]:
        """A mapping with non-ASCII text, a set and a tuple."""
        return {"name": "José", "tags": {"b", "a"}, "pair": (1, 2)}

    @tool
    def nothing() -> None:
        """None."""

    calls = (ToolCall("r", "raw"), ToolCall("m", "mapping"), ToolCall("n", "nothing"))
    model = ScriptedModel([AssistantMessage("", calls), AssistantMessage("done")])
    client = await create_agent(model, tools=[raw, mapping, nothing])
    await client.run("go")
    sent = {m.tool_call_id: m.content for m in model.requests[1].messages if isinstance(m, ToolMessage)}
    assert sent == {"r": "héllo", "m": '{"name": "José", "tags": ["a", "b"], "pair": [1, 2]}', "n": ""}


def test_a_tool_result_status_is_checked_when_made_and_when_changed() -> None:
    assert ToolResult("x", "failed").status == "failed"
    with pytest.raises(ValueError, match=r"ToolResult\.status must be one of succeeded, failed, skipped, cancelled"):
        ToolResult("x", "error")
    result = ToolResult("x")
    with pytest.raises(ValueError, match="got 'weird'"):
        result.status = "weird"
    assert result.status == "succeeded"


def test_thread_needs_a_plain_handler_that_takes_no_context() -> None:
    async def coroutine() -> str:
        """Async."""
        return ""

    def wants_context(context: AgentRunContext) -> str:
        """Needs the context."""
        return ""

    with pytest.raises(TypeError, match="thread=True needs a plain"):
        tool(thread=True)(coroutine)
    with pytest.raises(TypeError, match="cannot receive the request context"):
        tool(thread=True)(wants_context)

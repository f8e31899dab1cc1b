"""The @tool decorator: schemas from hints and docstrings, validation, injection."""

from __future__ import annotations

from typing import Literal

import pytest

from orchestrator import AgentRunContext, ToolArgumentsError, ToolCall, tool
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

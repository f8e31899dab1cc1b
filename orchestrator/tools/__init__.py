"""Tools: definitions and the ``@tool`` decorator (``definition``), type hints as JSON Schema and
arguments converted into them (``schema``, shared with structured output), and which event loop a
coroutine tool or hook runs on under an ``AgentHost`` (``loops``)."""

from orchestrator.tools.definition import (
    Handler,
    ServerToolDefinition,
    ToolDefinition,
    ToolResult,
    build_tool,
    tool,
)
from orchestrator.tools.loops import runs_on
from orchestrator.tools.schema import check_schema, convert, schema_for, validate_arguments

__all__ = [
    "Handler",
    "ServerToolDefinition",
    "ToolDefinition",
    "ToolResult",
    "build_tool",
    "check_schema",
    "convert",
    "runs_on",
    "schema_for",
    "tool",
    "validate_arguments",
]

"""Structured output: a request's final answer must be a JSON value of a type, or match a JSON Schema.

``OutputType`` names what the answer must be: a dataclass, an attrs class, a TypedDict, a pydantic
model (when pydantic is installed), any other hint ``orchestrator.tools.schema`` has a JSON
Schema for (``list[int]``, an enum ...), or a JSON Schema given as a dict. The request's final
answer is parsed as JSON and converted into the type (``OutputType.parse``); an answer that does
not fit goes back to the model with the reason, up to ``retries`` times, and then fails the
request with ``OutputValidationError``. The answer that fits is returned as a ``StructuredAnswer``:
the AssistantMessage, its text kept, with ``output`` the typed value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from machines.values import FieldRepr
from orchestrator.checks import whole
from orchestrator.errors import AgentError, ValueMismatch
from orchestrator.messages import AssistantMessage
from orchestrator.tools.schema import check_schema, convert, schema_for

__all__ = ["DEFAULT_OUTPUT_RETRIES", "OutputType", "OutputValidationError", "StructuredAnswer", "output_type"]

#: How many times an answer that does not fit goes back to the model before the request fails.
DEFAULT_OUTPUT_RETRIES = 2


def _schema_of(kind: Any) -> dict[str, Any]:
    if isinstance(kind, Mapping):
        return dict(kind)
    return schema_for(kind)


def _name_of(kind: Any) -> str:
    if isinstance(kind, Mapping):
        title = kind.get("title")
        return title if isinstance(title, str) and title else "output"
    name = getattr(kind, "__name__", None)
    return name if isinstance(name, str) else "output"


@attrs.frozen(eq=False, repr=False)
class OutputType(FieldRepr):
    """What a request's final answer must be: ``type`` (a class or hint, or a JSON Schema dict).

    ``schema`` is its JSON Schema (sent to providers that take one) and ``name`` its name there.
    ``retries``: how many answers that do not fit go back to the model before the request fails.
    A type with no JSON Schema raises TypeError here, naming it.
    """

    type: Any
    retries: int = attrs.field(default=DEFAULT_OUTPUT_RETRIES, validator=whole(0), kw_only=True)
    schema: Mapping[str, Any] = attrs.field(init=False)
    name: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "schema", _schema_of(self.type))
        object.__setattr__(self, "name", _name_of(self.type))

    @property
    def wrapped(self) -> bool:
        """Whether providers that take only an object schema get the value as the ``value`` property of one."""
        return self.schema.get("type") != "object" and "properties" not in self.schema

    def object_schema(self) -> dict[str, Any]:
        """The schema as an object schema: itself, or an object whose ``value`` property it is (``wrapped``)."""
        if not self.wrapped:
            return dict(self.schema)
        return {
            "type": "object",
            "properties": {"value": dict(self.schema)},
            "required": ["value"],
            "additionalProperties": False,
        }

    @property
    def wire_name(self) -> str:
        """``name`` as providers accept it (letters, digits, ``_`` and ``-``; at most 64)."""
        cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in self.name)
        return cleaned[:64] or "output"

    def unwrapped(self, text: str) -> str:
        """An answer given for ``object_schema`` as the JSON of the value itself (unchanged if not wrapped or
        not such an object: the check then says what is wrong)."""
        import json

        if not self.wrapped:
            return text
        try:
            decoded = json.loads(_unfenced(text.strip()))
        except ValueError:
            return text
        if isinstance(decoded, dict) and set(decoded) == {"value"}:
            return json.dumps(decoded["value"], ensure_ascii=False)
        return text

    def parse(self, text: str) -> Any:
        """The answer ``text`` (JSON, optionally in a Markdown code fence) as a value of the type.

        Raises ValueMismatch naming the field at fault (an empty path: the whole answer) and why.
        """
        import json  # not at import: importing orchestrator loads no json

        body = _unfenced(text.strip())
        try:
            value = json.loads(body)
        except ValueError as bad:
            raise ValueMismatch("", f"the answer is not JSON ({bad})") from None
        if isinstance(self.type, Mapping):
            return check_schema(self.schema, value)
        return convert(self.type, value)

    def retry_prompt(self, mismatch: ValueMismatch) -> str:
        """What the model is told when its answer does not fit."""
        import json

        where = f"at {mismatch.path}: " if mismatch.path else ""
        return (
            f"Your answer does not match the required output: {where}{mismatch.reason}. "
            "Answer again with only a JSON value that matches this JSON Schema:\n"
            + json.dumps(self.schema, ensure_ascii=False)
        )


def _unfenced(text: str) -> str:
    """``text`` without a surrounding Markdown code fence (```json ... ```), which models often add."""
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        inner = text[3:-3]
        newline = inner.find("\n")
        return inner[newline + 1 :] if newline >= 0 else inner
    return text


def output_type(value: Any) -> OutputType | None:
    """``value`` as an OutputType: None stays None, an OutputType is itself, anything else is wrapped."""
    if value is None or isinstance(value, OutputType):
        return value
    return OutputType(value)


class OutputValidationError(AgentError):
    """The final answer did not fit the output type after every retry.

    ``error`` is the last ValueMismatch (its ``path`` and ``reason``), ``answer`` the last answer's
    text and ``attempts`` how many answers were checked.
    """

    def __init__(self, error: ValueMismatch, answer: str, attempts: int) -> None:
        super().__init__(f"the answer did not match the output type after {attempts} attempt(s): {error}")
        self.error = error
        self.answer = answer
        self.attempts = attempts


@attrs.frozen(eq=False, repr=False)
class StructuredAnswer(AssistantMessage):
    """The final answer of a request with an output type: the message (its text kept) and ``output``, the value."""

    output: Any = attrs.field(default=None, kw_only=True)

    @classmethod
    def of(cls, message: AssistantMessage, output: Any) -> StructuredAnswer:
        return cls(message.content, message.tool_calls, reasoning=message.reasoning, output=output)

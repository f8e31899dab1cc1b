"""The checks a model's completed response passes before the request uses it.

A model (a provider adapter, or an embedder's own) is treated as hostile: its
final message, reasoning, usage and stop reason are checked here, and a
response that breaks the contract is a ModelError naming what is wrong.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ModelError
from orchestrator.messages import AssistantMessage, ReasoningBlock, ToolCall, clean_message
from orchestrator.model import STOP_REASONS, ResponseCompletedEvent, StopReason, Usage, implied_stop_reason
from orchestrator.text import clean_text


def checked_response(message: Any) -> AssistantMessage:
    """The model's final message, checked and cleaned; a ModelError when it breaks the contract.

    Every tool call needs its own non-empty string id, since its one result (and
    any answer to an approval it asks for) is keyed by it, and a string name.
    Every text is then made encodable as UTF-8.
    """
    if not isinstance(message, AssistantMessage):
        raise ModelError(f"the model completed with a {type(message).__name__}, not an AssistantMessage")
    if not isinstance(message.content, str):
        raise ModelError(f"the model's answer text is a {type(message.content).__name__}, not a str")
    for call in message.tool_calls:
        if not isinstance(call, ToolCall):
            raise ModelError(f"the model returned a tool call of type {type(call).__name__}")
        if not isinstance(call.name, str):
            raise ModelError(f"the model returned a tool call whose name is a {type(call.name).__name__}")
        if not isinstance(call.id, str):
            raise ModelError(f"the model returned a call of {call.name!r} whose id is a {type(call.id).__name__}")
        if not call.id:
            raise ModelError(f"the model returned a call of {call.name!r} without an id")
        if call.invalid_arguments is not None and not isinstance(call.invalid_arguments, str):
            raise ModelError(f"the model returned a call of {call.name!r} whose invalid_arguments is not a str")
    for block in message.reasoning:
        _check_reasoning(block)
    try:
        cleaned_message = clean_message(message)
    except RecursionError:
        raise ModelError("the model returned tool-call arguments nested too deeply to handle") from None
    assert isinstance(cleaned_message, AssistantMessage)
    calls = cleaned_message.tool_calls
    if len(calls) > 1:
        seen: set[str] = set()
        for call in calls:  # ids as cleaned: two that differ only in a broken surrogate are one id
            if call.id in seen:
                raise ModelError(f"the model returned two tool calls with the id {call.id!r}")
            seen.add(call.id)
    return cleaned_message


def _check_reasoning(block: Any) -> None:
    if not isinstance(block, ReasoningBlock):
        raise ModelError(f"the model returned reasoning of type {type(block).__name__}, not a ReasoningBlock")
    if not isinstance(block.text, str):
        raise ModelError(f"the model returned reasoning whose text is a {type(block.text).__name__}")
    for name in ("signature", "data", "id"):
        value = getattr(block, name)
        if value is not None and not isinstance(value, str):
            raise ModelError(f"the model returned reasoning whose {name} is a {type(value).__name__}")


def checked_usage(usage: Any) -> Usage | None:
    """The reported usage, or a ModelError when it is not a Usage of non-negative counts."""
    if usage is None:
        return None
    if not isinstance(usage, Usage):
        raise ModelError(f"the model reported usage of type {type(usage).__name__}, not Usage")
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        value = getattr(usage, name)
        if value is None and name.startswith("cache_"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ModelError(f"the model reported {name}={value!r}, not a non-negative int")
    return usage


def checked_stop(completed: ResponseCompletedEvent, message: AssistantMessage) -> tuple[StopReason, str | None]:
    """The response's stop reason (implied from the message when the model gave none) and its raw value."""
    stop_reason = completed.stop_reason
    if stop_reason is None:
        stop_reason = implied_stop_reason(message)
    elif stop_reason not in STOP_REASONS:
        raise ModelError(f"the model completed with stop_reason {stop_reason!r}, not one of {list(STOP_REASONS)}")
    raw = completed.raw_stop_reason
    if raw is not None and not isinstance(raw, str):
        raise ModelError(f"the model's raw_stop_reason is a {type(raw).__name__}, not a str")
    return stop_reason, None if raw is None else clean_text(raw)

"""Each provider's own stop reasons, in the library's words (``orchestrator.model.StopReason``)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.model import StopReason

__all__ = ["ANTHROPIC_STOP_REASONS", "OPENAI_FINISH_REASONS", "normalised_stop"]

#: Anthropic Messages ``stop_reason`` values. ``pause_turn`` (a server-tool loop paused; send the
#: content back to go on) and anything not listed are ``other``.
ANTHROPIC_STOP_REASONS: Mapping[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
    "pause_turn": "other",
}

#: Chat Completions ``finish_reason`` values; anything not listed is ``other``.
OPENAI_FINISH_REASONS: Mapping[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


def normalised_stop(raw: str | None, table: Mapping[str, StopReason], *, has_calls: bool) -> StopReason | None:
    """The StopReason for a provider's ``raw`` value (None when it gave none: the runtime decides).

    An unknown value is ``other``. A response that calls tools but says it simply
    ended (``end_turn``, as some compatible servers report every finish) is
    ``tool_use``: the calls run either way, and the reason says so.
    """
    if raw is None:
        return None
    reason = table.get(raw, "other")
    return "tool_use" if reason == "end_turn" and has_calls else reason

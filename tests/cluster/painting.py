"""A scripted model for the cluster tests whose runs call one slow tool: it asks for ``slow_paint("red")`` (call
``p1``) once, then answers with the outcome of the call."""

from __future__ import annotations

from orchestrator import AssistantMessage, ToolCall, ToolMessage
from orchestrator.model import ModelRequest


def paint_then_report(request: ModelRequest) -> AssistantMessage:
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    if not results:
        return AssistantMessage("", (ToolCall("p1", "slow_paint", {"colour": "red"}),))
    return AssistantMessage(f"Outcome: {results[-1].text}")

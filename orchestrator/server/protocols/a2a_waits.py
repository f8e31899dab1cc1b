"""A call waiting for an answer, as A2A sees it: a question with options and the schema of its answer.

Each waiting call becomes a data part of an ``input-required`` status; the client's
follow-up message answers it with a data part (the answer object), or with plain text
where the call takes free text (``ask_user``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

APPROVAL = "tool_approval_response"
ASK_USER = "ask_user_response"
ENTER_PLAN = "enter_plan_mode_response"
EXIT_PLAN = "exit_plan_mode_response"

_APPROVED = {"type": "boolean", "description": "true approves, false declines"}


def answer_schema(response_event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema of an answer the waiting call accepts (``toolCallId`` aside)."""
    if response_event == APPROVAL:
        return {
            "type": "object",
            "properties": {
                "approved": _APPROVED,
                "reason": {"type": ["string", "null"], "description": "why, told to the model on a decline"},
                "remember": {"enum": ["session", None], "description": "'session': approve this tool for the session"},
            },
            "required": ["approved"],
        }
    if response_event == ASK_USER:
        answer: dict[str, Any] = {"type": "string"}
        options = _options(payload)
        if options:
            answer["enum"] = list(options)
        return {"type": "object", "properties": {"answer": answer}, "required": ["answer"]}
    if response_event in (ENTER_PLAN, EXIT_PLAN):
        return {"type": "object", "properties": {"approved": _APPROVED}, "required": ["approved"]}
    return {"type": "object"}


def _options(payload: Mapping[str, Any]) -> tuple[str, ...]:
    options = payload.get("options")
    if isinstance(options, (list, tuple)):
        return tuple(str(option) for option in options)
    return ()


def question(event: str, payload: Mapping[str, Any]) -> str:
    """The question a waiting call asks, in a sentence."""
    if event == "tool_approval":
        return f"Approve the call of {payload.get('name', 'a tool')} with arguments {payload.get('arguments', {})}?"
    if event == "ask_user":
        return str(payload.get("question", "The agent asks a question."))
    if event == "enter_plan_mode":
        return f"Enter Plan Mode? {payload.get('reason', '')}".strip()
    if event == "exit_plan_mode":
        return f"Approve this plan and leave Plan Mode?\n{payload.get('plan', '')}".strip()
    return f"The agent waits for an answer to {event!r}."


def takes_free_text(response_event: str) -> bool:
    """Whether a plain text message answers the call (as ``{"answer": text}``)."""
    return response_event == ASK_USER


@attrs.frozen
class Wait:
    """One call waiting for an answer, from the backend's pending list."""

    tool_call_id: str
    event: str
    payload: Mapping[str, Any]
    response_event: str

    @classmethod
    def of(cls, pending: Mapping[str, Any]) -> Wait:
        payload = pending.get("payload") or {}
        return cls(str(pending["tool_call_id"]), str(pending["event"]), payload, str(pending["response_event"]))

    def question(self) -> str:
        return question(self.event, self.payload)

    def data(self) -> dict[str, Any]:
        """The data part that asks: the call, the question, the options and the answer's schema."""
        return {
            "toolCallId": self.tool_call_id,
            "kind": self.event,
            "question": self.question(),
            "options": self.options(),
            "details": dict(self.payload),
            "responseSchema": answer_schema(self.response_event, self.payload),
        }

    def options(self) -> list[dict[str, Any]]:
        """The answers to choose from, as answer objects (none for a free-text question)."""
        if self.response_event in (APPROVAL, ENTER_PLAN, EXIT_PLAN):
            return [{"approved": True}, {"approved": False}]
        return [{"answer": option} for option in _options(self.payload)]

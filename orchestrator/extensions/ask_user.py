"""AskUserExtension: the model asks the user a question and waits for the answer.

``ask_user(question, options)`` pauses its call in awaiting_approval, streams an
``ask_user`` event and resumes when ``ask_user_response`` with
``{"tool_call_id": ..., "answer": ...}`` arrives through
``Agent.emit_external_event``; the answer is the tool result. An answer must be
a string and, when options were given, one of them; anything else is refused.
A blank question or a blank option is a failed tool result the model can read.
Routing and the pending-call rules are those of
``orchestrator.runtime.pending.ResponseRouter``, as for Plan Mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from orchestrator.checks import number
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Verdict
from orchestrator.errors import ToolArgumentsError
from orchestrator.events import AgentEvent, RunCancelledEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import ToolCall
from orchestrator.runtime.pending import ResponseExpired, ResponseRouter, SettledAnswer, Validator, WaitRule
from orchestrator.tools import ToolDefinition, ToolResult, build_tool

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

ASK_EVENT = "ask_user"
ANSWER_EVENT = "ask_user_response"


@attrs.frozen(kw_only=True)
class AskUserEvent(AgentEvent):
    """The model asks a question; answer with ``response_event``."""

    kind: ClassVar[str] = ASK_EVENT
    tool_call_id: str
    question: str
    options: tuple[str, ...]
    response_event: str = ANSWER_EVENT


def _answer_validator(options: tuple[str, ...]) -> Validator:
    def check(payload: Mapping[str, Any]) -> str | None:
        answer = payload.get("answer")
        if not isinstance(answer, str):
            return "'answer' must be a string"
        if options and answer not in options:
            return f"'answer' must be one of {list(options)}"
        return None

    return check


def _stored_validator(asked: Mapping[str, Any]) -> Validator:
    options = asked.get("options", [])
    if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
        return lambda payload: "the stored question has no readable options"
    return _answer_validator(tuple(options))


ASK_USER_WAIT = WaitRule(
    ANSWER_EVENT,
    _stored_validator,
    lambda asked, answer: SettledAnswer(str(answer["answer"])),
)
"""An answer to a question whose process stopped: checked like a live one, the answer is the result."""


class AskUserExtension(AgentExtension):
    """Offers ``ask_user`` and routes the user's answers back to waiting calls."""

    def __init__(self, *, expires_after: float | None = None) -> None:
        number(above=0, optional=True).check("AskUserExtension.expires_after", expires_after)
        self.expires_after = expires_after
        self.router = ResponseRouter()
        self.tool = self._build_tool()

    def _build_tool(self) -> ToolDefinition:
        router = self.router
        expires_after = self.expires_after

        async def ask_user(
            context: AgentRunContext, call: ToolCall, question: str, options: list[str]
        ) -> str | ToolResult:
            """Ask the user a question and wait for the answer.

            Args:
                question: what to ask
                options: the allowed answers; an empty list allows any answer
            """
            call_id = call.id
            choices = tuple(options)
            if not question.strip():
                raise ToolArgumentsError("question: must not be blank")
            if any(not choice.strip() for choice in choices):
                raise ToolArgumentsError("options: an option must not be blank")
            try:
                answer = await router.wait(
                    context,
                    call_id,
                    response_event=ANSWER_EVENT,
                    validate=_answer_validator(choices),
                    announce=AskUserEvent(tool_call_id=call_id, question=question, options=choices),
                    expires_after=expires_after,
                    expired_outcome="unanswered",
                )
            except ResponseExpired as expired:
                return ToolResult(f"nobody answered the question within {expired.seconds:g} s", "failed")
            return str(answer["answer"])

        # Asking again changes nothing anywhere: a durable run cut off before its question was written asks it.
        return build_tool(ask_user, idempotent=True)

    async def on_tool(self, context: AgentRunContext) -> None:
        """Offer ``ask_user`` in every request."""
        context.register_tool(self.tool)

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        """Drop the failed request's questions."""
        self.router.withdraw_request(context.session_id, context.request_id)

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        """Drop a cancelled request's questions."""
        if isinstance(event, RunCancelledEvent):
            self.router.withdraw_request(context.session_id, context.request_id)

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Verdict:
        """Take an ``ask_user_response`` that answers a waiting question of this session, or say why not."""
        return event.name == ANSWER_EVENT and self.router.consider(config, event)

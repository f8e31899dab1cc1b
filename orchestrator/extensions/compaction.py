"""CompactionExtension: summarize older history through the model.

``await agent.compact(config)`` restores the session and runs ``on_compact``;
with ``auto=True`` the same pass also runs in every turn of a request, after the
model request is assembled and before ``before_model``. When the estimated size
of the messages passes ``threshold_tokens``,
everything but the leading system messages and the last ``keep_last``
messages is rendered as a transcript and summarized by the model (the
agent's own unless another is given). The session
then holds the summary (a UserMessage) followed by the kept messages, and the
runtime stores that as the session's history. An assistant message and its
tool results are never separated: the kept part never starts with a result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.events import ExtensionEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage, text_of
from orchestrator.model import Model, ModelRequest, ResponseCompletedEvent, TextDeltaEvent

if TYPE_CHECKING:
    from orchestrator.context import AgentRunContext

DEFAULT_PROMPT = (
    "You summarize conversations between a user and an assistant that uses tools. "
    "Write a concise summary that lets the assistant continue the work: the user's goals and "
    "constraints, decisions taken, facts learned from tool results (file names, values, errors), "
    "work completed, and what remains open. Do not address the user; output only the summary."
)

SUMMARY_PREFIX = "Summary of earlier conversation: "


def message_text(message: Message) -> str:
    """The text a message contributes to a model request (images left out)."""
    if isinstance(message, AssistantMessage):
        calls = " ".join(f"{c.name}({json.dumps(c.arguments, default=str)})" for c in message.tool_calls)
        return f"{message.content} {calls}".strip()
    if isinstance(message, UserMessage):
        return text_of(message.content)
    return message.content


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A rough token count: characters divided by four."""
    return sum(len(message_text(m)) for m in messages) // 4


def transcript(messages: Sequence[Message]) -> str:
    """Messages as plain text, one block per message."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            lines.append(f"[tool result {message.name} ({message.status})]: {message.content}")
        else:
            lines.append(f"[{message.role}]: {message_text(message)}")
    return "\n\n".join(lines)


def split_point(messages: Sequence[Message], keep_last: int) -> int:
    """Index where the kept tail starts: at most ``keep_last`` messages, never a tool result first."""
    cut = max(len(messages) - keep_last, 0)
    while 0 < cut < len(messages) and isinstance(messages[cut], ToolMessage):
        cut -= 1
    return cut


class CompactionExtension(AgentExtension):
    """Replace older history with a model-written summary once it grows past a threshold."""

    def __init__(
        self,
        model: Model | None = None,
        *,
        threshold_tokens: int = 4000,
        keep_last: int = 6,
        prompt: str = DEFAULT_PROMPT,
        auto: bool = False,
    ) -> None:
        if threshold_tokens < 0 or keep_last < 0:
            raise ValueError("threshold_tokens and keep_last must not be negative")
        self.auto = auto
        self.model = model
        self.threshold_tokens = threshold_tokens
        self.keep_last = keep_last
        self.prompt = prompt

    async def summarize(self, messages: Sequence[Message], model: Model) -> str:
        """``model``'s summary of ``messages``."""
        request = ModelRequest(
            (
                SystemMessage(self.prompt),
                UserMessage("Summarize this conversation:\n\n" + transcript(messages)),
            )
        )
        pieces: list[str] = []
        final: str | None = None
        stream = model.stream(request)
        try:
            async for event in stream:
                if isinstance(event, TextDeltaEvent):
                    pieces.append(event.text)
                elif isinstance(event, ResponseCompletedEvent):
                    final = event.message.content
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()
        return (final if final is not None else "".join(pieces)).strip()

    async def on_compact(self, context: AgentRunContext) -> None:
        """Compact the restored session when it passes the threshold (``Agent.compact``)."""
        await self.compact(context)

    async def compact_turn(self, context: AgentRunContext) -> bool:
        """With ``auto``, compact the request's context before a model call; whether it did."""
        return self.auto and await self.compact(context)

    async def compact(self, context: AgentRunContext) -> bool:
        """Summarize all but the leading system messages and the kept tail; whether it did."""
        messages = list(context.messages)
        before = estimate_tokens(messages)
        if before <= self.threshold_tokens:
            return False
        head = 0
        while head < len(messages) and isinstance(messages[head], SystemMessage):
            head += 1
        system, conversation = messages[:head], messages[head:]
        cut = split_point(conversation, self.keep_last)
        if cut == 0:
            return False
        older, recent = conversation[:cut], conversation[cut:]
        summary = await self.summarize(older, self.model or context.agent.model)
        compacted: list[Message] = [*system, UserMessage(SUMMARY_PREFIX + summary), *recent]
        context.replace_messages(compacted)
        await context.emit(
            ExtensionEvent(
                name="history_compacted",
                payload={
                    "summarized": len(older),
                    "kept": len(recent),
                    "tokens_before": before,
                    "tokens_after": estimate_tokens(compacted),
                },
            )
        )
        return True

"""CompactionExtension: summarize older history through the model.

``await agent.compact(config)`` restores the session and runs ``on_compact``,
which compacts whenever there is anything to compact. With ``auto=True`` a pass
also runs in every turn of a request, after the model request is assembled and
before ``before_model``, when the estimated size of the messages passes
``threshold_tokens`` (see ``compact_turn`` for a pass that cannot get under it).
A pass renders everything but the leading system messages and the last
``keep_last`` messages as a transcript and has the model (the agent's own
unless another is given) summarize it. The session
then holds the summary (a UserMessage) followed by the kept messages, and the
runtime stores that as the session's history. An assistant message and its
tool results are never separated: the kept part never starts with a result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.checks import flag, whole
from orchestrator.checks import text as _text
from orchestrator.events import CompactionCompletedEvent, CompactionStartedEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    describe_parts,
    images_of,
    text_of,
)
from orchestrator.model import Model, ModelRequest, ResponseCompletedEvent, TextDeltaEvent

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

DEFAULT_PROMPT = (
    "You summarize conversations between a user and an assistant that uses tools. "
    "Write a concise summary that lets the assistant continue the work: the user's goals and "
    "constraints, decisions taken, facts learned from tool results (file names, values, errors), "
    "work completed, and what remains open. Do not address the user; output only the summary."
)

SUMMARY_PREFIX = "Summary of earlier conversation: "


#: What one image counts for in ``estimate_tokens``: about what providers charge for an image of
#: a megapixel or so (Anthropic: width x height / 750 tokens, images scaled to about 1.15 MP).
IMAGE_TOKENS = 1600


def message_text(message: Message) -> str:
    """The text a message contributes to a model request (images left out)."""
    if isinstance(message, AssistantMessage):
        calls = " ".join(f"{c.name}({json.dumps(c.arguments, default=str)})" for c in message.tool_calls)
        return f"{message.content} {calls}".strip()
    if isinstance(message, (UserMessage, ToolMessage)):
        return text_of(message.content)
    return message.content


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A rough token count: characters divided by four, plus ``IMAGE_TOKENS`` for each image."""
    images = sum(len(images_of(m.content)) for m in messages if isinstance(m, (UserMessage, ToolMessage)))
    return sum(len(message_text(m)) for m in messages) // 4 + images * IMAGE_TOKENS


def transcript(messages: Sequence[Message]) -> str:
    """Messages as plain text, one block per message."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            lines.append(f"[tool result {message.name} ({message.status})]: {describe_parts(message.content)}")
        elif isinstance(message, UserMessage):
            lines.append(f"[user]: {describe_parts(message.content)}")
        else:
            lines.append(f"[{message.role}]: {message_text(message)}")
    return "\n\n".join(lines)


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary an earlier compaction wrote."""
    return (
        isinstance(message, UserMessage)
        and isinstance(message.content, str)
        and message.content.startswith(SUMMARY_PREFIX)
    )


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
        if model is not None and not callable(getattr(model, "stream", None)):
            raise TypeError(f"CompactionExtension.model must be a Model or None, got {type(model).__name__}")
        whole(0).check("CompactionExtension.threshold_tokens", threshold_tokens)
        whole(0).check("CompactionExtension.keep_last", keep_last)
        _text(blank=False).check("CompactionExtension.prompt", prompt)
        flag().check("CompactionExtension.auto", auto)
        self.auto = auto
        self.model = model
        self.threshold_tokens = threshold_tokens
        self.keep_last = keep_last
        self.prompt = prompt
        # Per session: the size a pass left when it could not get under the threshold.
        self._floors: dict[str, int] = {}

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
        """Compact the restored session whenever there is anything to compact (``Agent.compact``)."""
        await self.compact(context, force=True)

    async def compact_turn(self, context: AgentRunContext) -> bool:
        """With ``auto``, compact the request's context before a model call when it is due; whether it did.

        It is due above ``threshold_tokens``; after a pass that could not bring the
        session under the threshold, only once the context has grown by another
        ``threshold_tokens`` beyond what that pass left (so a summary that is itself
        over the threshold is not summarized again in every turn).
        """
        if not self.auto:
            return False
        floor = self._floors.get(context.session_id, 0)
        if estimate_tokens(context.messages) <= floor + self.threshold_tokens:
            return False
        return await self.compact(context, force=True)

    async def compact(self, context: AgentRunContext, *, force: bool = False) -> bool:
        """Summarize all but the leading system messages and the kept tail; whether it did.

        Without ``force`` only above ``threshold_tokens``. Nothing happens when the
        part to summarize is empty or is only an earlier summary. Streams
        ``compaction_started`` before the summarizer is called and
        ``compaction_completed`` once the messages were replaced.
        """
        messages = list(context.messages)
        before = estimate_tokens(messages)
        if not force and before <= self.threshold_tokens:
            return False
        head = 0
        while head < len(messages) and isinstance(messages[head], SystemMessage):
            head += 1
        system, conversation = messages[:head], messages[head:]
        cut = split_point(conversation, self.keep_last)
        older, recent = conversation[:cut], conversation[cut:]
        if all(is_summary(message) for message in older):
            return False
        await context.emit(CompactionStartedEvent(tokens_before=before))
        summary = await self.summarize(older, self.model or context.agent.model)
        compacted: list[Message] = [*system, UserMessage(SUMMARY_PREFIX + summary), *recent]
        context.replace_messages(compacted)
        after = estimate_tokens(compacted)
        if after > self.threshold_tokens:
            self._floors[context.session_id] = after
        else:
            self._floors.pop(context.session_id, None)
        await context.emit(
            CompactionCompletedEvent(tokens_before=before, tokens_after=after, messages_replaced=len(older))
        )
        return True

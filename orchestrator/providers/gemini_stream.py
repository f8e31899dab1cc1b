"""One Gemini ``streamGenerateContent`` stream assembled into model events, every field type-checked."""

from __future__ import annotations

import re
import uuid

import attrs

from orchestrator.messages import AssistantMessage, ReasoningBlock, ToolCall
from orchestrator.model import (
    ModelEvent,
    ReasoningDeltaEvent,
    ResponseCompletedEvent,
    StopReason,
    TextDeltaEvent,
    ToolCallStreamEvent,
    Usage,
)
from orchestrator.providers.errors import (
    AuthenticationError,
    BadRequestError,
    MalformedStreamError,
    ProviderError,
    RateLimitError,
    ServerError,
)
from orchestrator.providers.fields import Fields
from orchestrator.text import SurrogateJoiner, clean_json, clean_text

__all__ = ["GENERATED_CALL_ID", "GeminiAssembler", "gemini_error"]

#: Tool-call ids made by the adapter (Gemini sends calls without ids): ``gcall_<12 hex>_<n>``,
#: one prefix per response and a counter within it. They are not sent back to Gemini.
GENERATED_CALL_ID = re.compile(r"gcall_[0-9a-f]{12}_\d+")

_STATUS_CLASSES: dict[str, type[ProviderError]] = {
    "RESOURCE_EXHAUSTED": RateLimitError,
    "UNAVAILABLE": ServerError,
    "INTERNAL": ServerError,
    "DEADLINE_EXCEEDED": ServerError,
    "UNKNOWN": ServerError,
    "UNAUTHENTICATED": AuthenticationError,
    "PERMISSION_DENIED": AuthenticationError,
    "INVALID_ARGUMENT": BadRequestError,
    "FAILED_PRECONDITION": BadRequestError,
    "NOT_FOUND": BadRequestError,
}

_FILTERED = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT"}
)


def gemini_error(error: Fields) -> ProviderError:
    """The typed error for an ``error`` object sent inside a stream (``code``, ``message``, ``status``)."""
    status = clean_text(str(error.raw("status") or ""))
    message = clean_text(str(error.raw("message") or "stream error"))
    cls = _STATUS_CLASSES.get(status, ServerError)
    return cls(f"{status}: {message}" if status else message, body=clean_text(repr(error.data))[:2000])


@attrs.define
class _Thought:
    text: list[str] = attrs.field(factory=list)
    signature: str | None = None


class GeminiAssembler:
    """Builds one response from ``GenerateContentResponse`` chunks (only candidate 0 is read).

    Text parts stream as text, ``thought`` parts as reasoning; a ``functionCall`` part
    is a whole call, announced at once, with Gemini's ``id`` or a generated one (an
    id used twice is MalformedStreamError). Thought signatures are kept as
    ReasoningBlocks: on a thought (with its text), on a call (``id`` = the call's
    id), or on the answer's text (no text, no id). An ``error`` object raises the
    typed error its ``status`` names.
    """

    def __init__(self) -> None:
        self.prefix = f"gcall_{uuid.uuid4().hex[:12]}"
        self.text: list[str] = []
        self.joiner = SurrogateJoiner()
        self.thoughts: list[_Thought] = []
        self.thought_joiner = SurrogateJoiner()
        self.calls: list[ToolCall] = []
        self.call_signatures: dict[str, str] = {}
        self.text_signature: str | None = None
        self.finish_reason: str | None = None
        self.block_reason: str | None = None
        self.usage: Usage | None = None
        self.carried_content = False
        """Whether the chunk fed last carried anything (a candidate, usage, prompt feedback)."""

    def feed(self, chunk: Fields) -> list[ModelEvent]:
        if chunk.has("error"):
            raise gemini_error(chunk.obj("error"))
        events: list[ModelEvent] = []
        usage = chunk.obj("usageMetadata")
        if usage:
            self.usage = Usage(
                usage.count("promptTokenCount") + usage.count("toolUsePromptTokenCount"),
                usage.count("candidatesTokenCount") + usage.count("thoughtsTokenCount"),
                cache_read_tokens=usage.index("cachedContentTokenCount"),
            )
        block = chunk.obj("promptFeedback").text("blockReason")
        if block:
            self.block_reason = clean_text(block)
        candidates = list(chunk.objects("candidates"))
        self.carried_content = bool(candidates or usage or block)
        for candidate in candidates:
            if (candidate.index("index") or 0) != 0:
                continue
            for part in candidate.obj("content").objects("parts"):
                events.extend(self._part(part))
            if finish := candidate.text("finishReason"):
                self.finish_reason = clean_text(finish)
        return events

    def _part(self, part: Fields) -> list[ModelEvent]:
        signature = part.text("thoughtSignature")
        if part.has("functionCall"):
            return self._call(part.obj("functionCall"), signature)
        text = part.text("text") or ""
        if part.raw("thought") is True:
            return self._thought(text, signature)
        if signature is not None and self.text_signature is None:
            self.text_signature = clean_text(signature)
        piece = self.joiner.feed(text) if text else ""
        if not piece:
            return []
        self.text.append(piece)
        return [TextDeltaEvent(piece)]

    def _thought(self, text: str, signature: str | None) -> list[ModelEvent]:
        if not self.thoughts or self.thoughts[-1].signature is not None:
            self.thoughts.append(_Thought())
        current = self.thoughts[-1]
        piece = self.thought_joiner.feed(text) if text else ""
        if signature is not None:
            piece += self.thought_joiner.flush()
            current.signature = clean_text(signature)
        if not piece:
            return []
        current.text.append(piece)
        return [ReasoningDeltaEvent(piece)]

    def _call(self, call: Fields, signature: str | None) -> list[ModelEvent]:
        name = clean_text(call.required_text("name"))
        arguments = call.raw("args")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise call.wrong("args", "an object")
        call_id = call.identifier("id") or f"{self.prefix}_{len(self.calls)}"
        if any(known.id == call_id for known in self.calls):
            raise MalformedStreamError(f"two function calls have the id {call_id!r}")
        self.calls.append(ToolCall(call_id, name, clean_json(arguments)))
        if signature is not None:
            self.call_signatures[call_id] = clean_text(signature)
        return [ToolCallStreamEvent(call_id, name)]

    @property
    def finished(self) -> bool:
        """Whether a finish reason (or a blocked prompt) arrived: a stream that ends without one was cut."""
        return self.finish_reason is not None or self.block_reason is not None

    def finish(self) -> list[ModelEvent]:
        """The text and reasoning held back (half a surrogate pair), at the end of the stream."""
        events: list[ModelEvent] = []
        if thought := self.thought_joiner.flush():
            self.thoughts[-1].text.append(thought)
            events.append(ReasoningDeltaEvent(thought))
        if text := self.joiner.flush():
            self.text.append(text)
            events.append(TextDeltaEvent(text))
        return events

    def stop_reason(self) -> tuple[StopReason, str | None]:
        """The normalised stop reason and Gemini's own ``finishReason`` (or ``blockReason``)."""
        raw = self.finish_reason
        if raw is None:
            return "content_filter", self.block_reason
        if raw == "STOP":
            return ("tool_use" if self.calls else "end_turn"), raw
        if raw == "MAX_TOKENS":
            return "max_tokens", raw
        return ("content_filter" if raw in _FILTERED else "other"), raw

    def reasoning(self) -> tuple[ReasoningBlock, ...]:
        blocks = [ReasoningBlock("".join(t.text), signature=t.signature) for t in self.thoughts]
        if self.text_signature is not None:
            blocks.append(ReasoningBlock(signature=self.text_signature))
        blocks.extend(ReasoningBlock(signature=s, id=call_id) for call_id, s in self.call_signatures.items())
        return tuple(blocks)

    def completed(self) -> ResponseCompletedEvent:
        stop, raw = self.stop_reason()
        message = AssistantMessage("".join(self.text), self.calls, reasoning=self.reasoning())
        return ResponseCompletedEvent(message, self.usage, stop_reason=stop, raw_stop_reason=raw)

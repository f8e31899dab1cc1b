"""One OpenAI Responses API stream assembled into model events, every field type-checked."""

from __future__ import annotations

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
from orchestrator.providers._http import parse_arguments
from orchestrator.providers.errors import MalformedStreamError
from orchestrator.providers.fields import Fields, stream_error
from orchestrator.text import SurrogateJoiner, clean_text

__all__ = ["ResponsesAssembler"]

_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
_REASONING_DELTAS = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})
_TERMINAL = frozenset({"response.completed", "response.incomplete"})
_INCOMPLETE_REASONS: dict[str, StopReason] = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}


def _opaque(value: str | None) -> str | None:
    return None if value is None else clean_text(value)


@attrs.define
class _Item:
    """One output item: a message, a function call, a reasoning item, or a kind this adapter skips."""

    kind: str
    id: str | None = None
    text: list[str] = attrs.field(factory=list)
    joiner: SurrogateJoiner = attrs.field(factory=SurrogateJoiner)
    summary_index: int | None = None
    call_id: str | None = None
    name: str = ""
    arguments: list[str] = attrs.field(factory=list)
    final_arguments: str | None = None
    encrypted: str | None = None
    done: bool = False
    announced: bool = False

    def call(self) -> ToolCall:
        raw = self.final_arguments if self.final_arguments is not None else "".join(self.arguments)
        return ToolCall(str(self.call_id), self.name, *parse_arguments(raw))


class ResponsesAssembler:
    """Builds one response from Responses stream events.

    Output items are keyed by ``output_index``: an item added twice, a delta or
    ``done`` for an item that is unknown or already done, a delta of the wrong
    kind for its item, and a function call without a ``call_id`` (or with one
    used twice) are MalformedStreamError. ``error`` and ``response.failed``
    events raise the typed error they name. Event types the adapter does not
    know are skipped. A stream that sends only its terminal event is read from
    that event's ``output``.
    """

    def __init__(self) -> None:
        self.items: dict[int, _Item] = {}
        self.call_ids: set[str] = set()
        self.refused = False
        self.finished = False
        self.status: str | None = None
        self.incomplete_reason: str | None = None
        self.usage: Usage | None = None
        self.carried_content = False
        """Whether the event fed last was a ``response.*`` event (anything else leaves the idle timer running)."""

    def feed(self, data: Fields) -> list[ModelEvent]:
        kind = data.required_text("type")
        self.carried_content = kind.startswith("response.")
        if kind == "error":
            raise stream_error({"code": data.raw("code"), "message": data.raw("message") or "stream error"})
        if kind == "response.failed":
            raise stream_error(data.obj("response").raw("error") or "the response failed")
        if kind in _TERMINAL:
            return self._finish(kind, data.obj("response"))
        if kind == "response.output_item.added":
            return self._added(data)
        if kind == "response.output_item.done":
            return self._done(data.required_index("output_index"), data.obj("item"))
        if kind in _TEXT_DELTAS:
            item = self._open(data, "message")
            self.refused = self.refused or kind == "response.refusal.delta"
            return self._text(item, data.required_text("delta"))
        if kind in _REASONING_DELTAS:
            return self._reasoning_delta(data)
        if kind == "response.function_call_arguments.delta":
            self._open(data, "function_call").arguments.append(data.required_text("delta"))
        elif kind == "response.function_call_arguments.done":
            self._open(data, "function_call").final_arguments = data.required_text("arguments")
        return []

    def _open(self, data: Fields, kind: str) -> _Item:
        index = data.required_index("output_index")
        item = self.items.get(index)
        event = data.raw("type")
        if item is None:
            raise MalformedStreamError(f"{event} for unknown output item {index}")
        if item.done:
            raise MalformedStreamError(f"{event} for output item {index}, which is already done")
        if item.kind != kind:
            raise MalformedStreamError(f"{event} for a {item.kind} item")
        return item

    def _added(self, data: Fields) -> list[ModelEvent]:
        index = data.required_index("output_index")
        if index in self.items:
            raise MalformedStreamError(f"output item {index} added twice")
        fields = data.obj("item")
        item = self.items[index] = _Item(fields.required_text("type"), id=fields.identifier("id"))
        if item.kind == "function_call":
            item.call_id = fields.identifier("call_id")
            item.name = clean_text(fields.text("name") or "")
            if initial := fields.text("arguments"):
                item.arguments.append(initial)
        elif item.kind == "reasoning":
            item.encrypted = _opaque(fields.text("encrypted_content"))
        return []

    def _done(self, index: int, fields: Fields) -> list[ModelEvent]:
        item = self.items.get(index)
        kind = fields.required_text("type")
        if item is None:
            item = self.items[index] = _Item(kind)
        elif item.done:
            raise MalformedStreamError(f"output item {index} done twice")
        elif item.kind != kind:
            raise MalformedStreamError(f"output item {index} was added as {item.kind} and done as {kind}")
        item.id = fields.identifier("id") or item.id
        if kind == "function_call":
            item.call_id = fields.identifier("call_id") or item.call_id
            item.name = clean_text(fields.text("name") or item.name)
            item.final_arguments = fields.text("arguments") if fields.has("arguments") else item.final_arguments
            item.done = True
            return self._announce(index)
        events: list[ModelEvent] = []
        if kind == "message":
            if not item.text and not item.joiner.pending:
                for part in fields.objects("content"):
                    refusal = part.raw("type") == "refusal"
                    self.refused = self.refused or refusal
                    events.extend(self._text(item, part.text("refusal" if refusal else "text") or ""))
            events.extend(self._text(item, item.joiner.flush()))
        elif kind == "reasoning":
            if fields.has("encrypted_content"):
                item.encrypted = _opaque(fields.text("encrypted_content"))
            if not item.text and not item.joiner.pending:
                parts = [p.text("text") or "" for p in fields.objects("summary")] or [
                    p.text("text") or "" for p in fields.objects("content")
                ]
                events.extend(self._reasoning(item, "\n\n".join(p for p in parts if p)))
            events.extend(self._reasoning(item, item.joiner.flush()))
        item.done = True
        return events

    def _reasoning_delta(self, data: Fields) -> list[ModelEvent]:
        item = self._open(data, "reasoning")
        delta = data.required_text("delta")
        part = data.index("summary_index")
        if part is not None and item.summary_index is not None and part != item.summary_index and item.text:
            delta = "\n\n" + delta  # a new summary part: keep the parts apart, as they were written
        item.summary_index = part if part is not None else item.summary_index
        return self._reasoning(item, delta)

    @staticmethod
    def _text(item: _Item, text: str) -> list[ModelEvent]:
        piece = item.joiner.feed(text) if text else ""
        if not piece:
            return []
        item.text.append(piece)
        return [TextDeltaEvent(piece)]

    @staticmethod
    def _reasoning(item: _Item, text: str) -> list[ModelEvent]:
        piece = item.joiner.feed(text) if text else ""
        if not piece:
            return []
        item.text.append(piece)
        return [ReasoningDeltaEvent(piece)]

    def _announce(self, index: int) -> list[ModelEvent]:
        item = self.items[index]
        if item.announced:
            return []
        if item.call_id is None:
            raise MalformedStreamError(f"function call {index} ({item.name or 'unnamed'}) has no call_id")
        if item.call_id in self.call_ids:
            raise MalformedStreamError(f"two function calls have the call_id {item.call_id!r}")
        self.call_ids.add(item.call_id)
        item.announced = True
        return [ToolCallStreamEvent(item.call_id, item.name)]

    def _finish(self, kind: str, response: Fields) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        if not self.items:
            for position, fields in enumerate(response.objects("output")):
                events.extend(self._done(position, fields))
        for index in sorted(self.items):
            item = self.items[index]
            if item.kind == "message":
                events.extend(self._text(item, item.joiner.flush()))
            elif item.kind == "reasoning":
                events.extend(self._reasoning(item, item.joiner.flush()))
            elif item.kind == "function_call":
                events.extend(self._announce(index))
        self.status = response.text("status") or ("incomplete" if kind == "response.incomplete" else "completed")
        self.incomplete_reason = response.obj("incomplete_details").text("reason")
        usage = response.obj("usage")
        if usage:
            details = usage.obj("input_tokens_details")
            self.usage = Usage(
                usage.count("input_tokens"),
                usage.count("output_tokens"),
                cache_read_tokens=details.index("cached_tokens"),
                cache_write_tokens=details.index("cache_write_tokens"),
            )
        self.finished = True
        return events

    def stop_reason(self, has_calls: bool) -> tuple[StopReason, str | None]:
        """The normalised stop reason and the provider's own (the incomplete reason, else the status)."""
        if self.status == "incomplete":
            reason = self.incomplete_reason
            return _INCOMPLETE_REASONS.get(reason or "", "other"), reason or self.status
        if self.status != "completed":
            return "other", self.status
        if has_calls:
            return "tool_use", self.status
        return ("refusal" if self.refused else "end_turn"), self.status

    def completed(self) -> ResponseCompletedEvent:
        ordered = [self.items[index] for index in sorted(self.items)]
        text = "".join("".join(item.text) for item in ordered if item.kind == "message")
        calls = tuple(item.call() for item in ordered if item.kind == "function_call")
        reasoning = tuple(
            ReasoningBlock("".join(item.text), data=item.encrypted, id=item.id)
            for item in ordered
            if item.kind == "reasoning"
        )
        stop, raw = self.stop_reason(bool(calls))
        message = AssistantMessage(text, calls, reasoning=reasoning)
        return ResponseCompletedEvent(message, self.usage, stop_reason=stop, raw_stop_reason=raw)

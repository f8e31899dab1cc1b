"""Redaction: a hook that changes events and messages before they are stored or sent.

``create_agent(..., redact=fn)`` calls ``fn`` with each event a request streams (to a run's
log, a ``client.stream`` consumer, a run store's event log) and delivers to ``on_event`` hooks
(so the session stores and the run store keep what it returns), and with each message before it
enters the agent's ``history``. It returns the value to use instead: the same kind (an event for an
event, a message for a message), unchanged or changed (``attrs.evolve``). The request itself
(and so the model, within that request) keeps the original; see docs/operations.md.
``mask(pattern, replacement)`` builds one that rewrites every string inside.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from orchestrator.events import AgentEvent
from orchestrator.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage

__all__ = ["RedactedKind", "RedactingSink", "Redactor", "mask", "redacted", "rewrite_strings"]

Redactor = Callable[[Any], Any]
"""Given an AgentEvent or a Message, the one to store and send instead (the same kind)."""
_MESSAGES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)
T = TypeVar("T")


class RedactedKind(TypeError):
    """The redactor returned ``got`` (a type name) for a ``given``: it must return the same kind of value."""

    def __init__(self, given: str, got: str) -> None:
        super().__init__(f"redact must return an {given} for an {given}, got {got}")
        self.given = given
        self.got = got


def redacted(redact: Redactor, value: T) -> T:
    """``redact(value)``, checked to be an event for an event and a message for a message."""
    result = redact(value)
    if result is value:
        return value
    if isinstance(value, AgentEvent) and not isinstance(result, AgentEvent):
        raise RedactedKind("AgentEvent", type(result).__name__)
    if isinstance(value, _MESSAGES) and not isinstance(result, _MESSAGES):
        raise RedactedKind("Message", type(result).__name__)
    checked: T = result
    return checked


class RedactingSink:
    """An event sink that hands the redacted event to ``inner``."""

    __slots__ = ("inner", "redact")

    def __init__(self, inner: Any, redact: Redactor) -> None:
        self.inner = inner
        self.redact = redact

    def offer(self, event: AgentEvent) -> bool:
        accepted: bool = self.inner.offer(redacted(self.redact, event))
        return accepted

    async def put(self, event: AgentEvent) -> None:
        await self.inner.put(redacted(self.redact, event))


def rewrite_strings(value: T, rewrite: Callable[[str], str]) -> T:
    """``value`` with ``rewrite`` applied to every string inside it: in attrs instances (events, messages,
    tool calls, content parts), mappings, lists and tuples. Unchanged parts are the same objects."""
    return _rewrite(value, rewrite)  # type: ignore[no-any-return]


def _rewrite(value: Any, rewrite: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        if isinstance(value, enum.Enum):
            return value  # a status or kind, never free text
        new = rewrite(value)
        return value if new == value else new
    if isinstance(value, Mapping):
        changed = {key: _rewrite(item, rewrite) for key, item in value.items()}
        if all(changed[key] is item for key, item in value.items()):
            return value
        return type(value)(changed) if isinstance(value, dict) else changed
    if isinstance(value, (list, tuple)):
        items = [_rewrite(item, rewrite) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return type(value)(items) if type(value) in (list, tuple) else items
    if attrs.has(type(value)):
        changes = {}
        for field in attrs.fields(type(value)):
            if not field.init:
                continue
            old = getattr(value, field.name)
            new = _rewrite(old, rewrite)
            if new is not old:
                changes[field.alias or field.name] = new
        return attrs.evolve(value, **changes) if changes else value
    return value


def mask(pattern: str | re.Pattern[str], replacement: str) -> Redactor:
    """A redactor replacing every match of ``pattern`` with ``replacement`` in every string of an event or
    message (its text, tool call arguments, tool results, payloads). A match split between two streamed
    text deltas is in neither, so is not masked in them (it is in the message that holds the whole text)."""
    compiled = re.compile(pattern)

    def redact(value: Any) -> Any:
        return rewrite_strings(value, lambda text: compiled.sub(replacement, text))

    return redact

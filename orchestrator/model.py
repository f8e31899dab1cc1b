"""The model interface, and ScriptedModel, an embedded model that plays a script."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol, TypeAlias, runtime_checkable

import attrs

from orchestrator.errors import ModelError
from orchestrator.messages import AssistantMessage, Message
from orchestrator.tools import ServerToolDefinition, ToolDefinition


@attrs.frozen
class ModelRequest:
    """What one model call receives. Fields are frozen; use ``attrs.evolve``."""

    messages: tuple[Message, ...] = attrs.field(converter=tuple[Message, ...])
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), converter=tuple[ToolDefinition, ...])
    server_tools: tuple[ServerToolDefinition, ...] = attrs.field(default=(), converter=tuple[ServerToolDefinition, ...])


@attrs.frozen
class Usage:
    """Token counts reported by a provider."""

    input_tokens: int = 0
    output_tokens: int = 0


@attrs.frozen
class TextDeltaEvent:
    """A piece of streamed assistant text."""

    text: str


@attrs.frozen
class ToolCallStreamEvent:
    """A complete tool call seen in the stream (before the response ends)."""

    id: str
    name: str


@attrs.frozen
class ResponseCompletedEvent:
    """The complete assistant message; always the last event of a stream."""

    message: AssistantMessage
    usage: Usage | None = None


ModelEvent: TypeAlias = TextDeltaEvent | ToolCallStreamEvent | ResponseCompletedEvent


@runtime_checkable
class Model(Protocol):
    """Anything that streams ModelEvents for a ModelRequest."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...


ScriptStep: TypeAlias = (
    AssistantMessage
    | Callable[[ModelRequest], AssistantMessage]
    | Callable[[ModelRequest], Awaitable[AssistantMessage]]
)


class ScriptExhausted(ModelError):
    """ScriptedModel was called more times than it has steps."""


class ScriptedModel:
    """Answers each call with the next step of a script and records the requests.

    A step is an AssistantMessage, or a callable (sync or async) that receives
    the ModelRequest and returns one. Text is streamed word by word.
    """

    def __init__(self, steps: Sequence[ScriptStep] = (), *, repeat_last: bool = False) -> None:
        self.steps = list(steps)
        self.repeat_last = repeat_last
        self.requests: list[ModelRequest] = []

    def add(self, *steps: ScriptStep) -> None:
        self.steps.extend(steps)

    async def _next_message(self, request: ModelRequest) -> AssistantMessage:
        index = len(self.requests)
        self.requests.append(request)
        if index >= len(self.steps):
            if not (self.repeat_last and self.steps):
                raise ScriptExhausted(f"script has {len(self.steps)} steps; call {index + 1} has none")
            index = len(self.steps) - 1
        step = self.steps[index]
        if isinstance(step, AssistantMessage):
            return step
        produced = step(request)
        message = await produced if inspect.isawaitable(produced) else produced
        if not isinstance(message, AssistantMessage):
            raise ModelError(f"script step returned {type(message).__name__}, not AssistantMessage")
        return message

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        message = await self._next_message(request)
        if message.content:
            words = message.content.split(" ")
            for position, word in enumerate(words):
                yield TextDeltaEvent(word if position == 0 else " " + word)
        for call in message.tool_calls:
            yield ToolCallStreamEvent(call.id, call.name)
        yield ResponseCompletedEvent(message)

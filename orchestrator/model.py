"""The model interface, and ScriptedModel, an embedded model that plays a script."""

from __future__ import annotations

import inspect
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal, Protocol, TypeAlias, get_args, runtime_checkable

import attrs

from machines.values import FieldValues
from orchestrator.checks import whole
from orchestrator.errors import ModelError
from orchestrator.messages import AssistantMessage, Message
from orchestrator.tools import ServerToolDefinition, ToolDefinition


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    return value if type(value) is tuple else tuple(value)


def _tools(value: Iterable[ToolDefinition]) -> tuple[ToolDefinition, ...]:
    return value if type(value) is tuple else tuple(value)


def _server_tools(value: Iterable[ServerToolDefinition]) -> tuple[ServerToolDefinition, ...]:
    return value if type(value) is tuple else tuple(value)


@attrs.frozen(eq=False, repr=False)
class ModelRequest(FieldValues):
    """What one model call receives. Fields are frozen; use ``attrs.evolve``."""

    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), converter=_tools)
    server_tools: tuple[ServerToolDefinition, ...] = attrs.field(default=(), converter=_server_tools)


StopReason: TypeAlias = Literal["end_turn", "tool_use", "max_tokens", "content_filter", "refusal", "other"]
"""Why a response ended, the same words for every provider.

``end_turn``: the model finished (or reached a stop sequence); ``tool_use``: it
stopped to have tools called; ``max_tokens``: it hit the output token limit
mid-response; ``content_filter``: the provider's filter withheld or cut it;
``refusal``: the model declined for safety reasons; ``other``: anything else
(a provider value this library does not know, a paused turn).
"""

STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)


@attrs.frozen(eq=False, repr=False)
class Usage(FieldValues):
    """Token counts reported by a provider.

    ``input_tokens`` counts every input token, cached ones included;
    ``cache_read_tokens`` (read from the provider's prompt cache) and
    ``cache_write_tokens`` (written to it) are the parts of it the provider
    reported, None when it did not report them.
    """

    input_tokens: int = attrs.field(default=0, validator=whole(0))
    output_tokens: int = attrs.field(default=0, validator=whole(0))
    cache_read_tokens: int | None = attrs.field(default=None, validator=whole(0, optional=True))
    cache_write_tokens: int | None = attrs.field(default=None, validator=whole(0, optional=True))


@attrs.frozen(init=False, eq=False, repr=False)
class TextDeltaEvent(FieldValues):
    """A piece of streamed assistant text."""

    text: str

    def __init__(self, text: str) -> None:
        # Made once per streamed piece: the one field is stored through its slot.
        _store_text(self, text)


_store_text = typing.cast(Any, TextDeltaEvent.__dict__["text"]).__set__


@attrs.frozen(eq=False, repr=False)
class ReasoningDeltaEvent(FieldValues):
    """A piece of the model's streamed reasoning (thinking) text."""

    text: str


@attrs.frozen(eq=False, repr=False)
class ToolCallStreamEvent(FieldValues):
    """A complete tool call seen in the stream (before the response ends)."""

    id: str
    name: str


@attrs.frozen(eq=False, repr=False)
class ResponseCompletedEvent(FieldValues):
    """The complete assistant message; always the last event of a stream.

    ``stop_reason`` says why the response ended (None: the runtime decides from
    the message: ``tool_use`` when it has tool calls, else ``end_turn``);
    ``raw_stop_reason`` is the provider's own word for it.
    """

    message: AssistantMessage
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    raw_stop_reason: str | None = None


ModelEvent: TypeAlias = TextDeltaEvent | ReasoningDeltaEvent | ToolCallStreamEvent | ResponseCompletedEvent


def implied_stop_reason(message: AssistantMessage) -> StopReason:
    """The stop reason a response without one has: ``tool_use`` when it calls tools, else ``end_turn``."""
    return "tool_use" if message.tool_calls else "end_turn"


@runtime_checkable
class Model(Protocol):
    """Anything that streams ModelEvents for a ModelRequest."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...


ScriptReply: TypeAlias = AssistantMessage | ResponseCompletedEvent
"""What one step answers: a message, or a whole completion (message, usage, stop reason)."""

ScriptStep: TypeAlias = (
    ScriptReply | Callable[[ModelRequest], ScriptReply] | Callable[[ModelRequest], Awaitable[ScriptReply]]
)


class ScriptExhausted(ModelError):
    """ScriptedModel was called more times than it has steps."""


class ScriptedModel:
    """Answers each call with the next step of a script and records the requests.

    A step is an AssistantMessage or a ResponseCompletedEvent (to give usage
    and a stop reason too), or a callable (sync or async) that receives the
    ModelRequest and returns one. The message's reasoning text is streamed
    first, then its text word by word, then its tool calls. One script serves
    every session of the agents using the model, in the order calls arrive;
    a callable step can pick its answer from the conversation it receives.
    """

    def __init__(self, steps: Sequence[ScriptStep] = (), *, repeat_last: bool = False) -> None:
        self.steps = list(steps)
        self.repeat_last = repeat_last
        self.requests: list[ModelRequest] = []

    def add(self, *steps: ScriptStep) -> None:
        self.steps.extend(steps)

    async def _next_reply(self, request: ModelRequest) -> ResponseCompletedEvent:
        index = len(self.requests)
        self.requests.append(request)
        if index >= len(self.steps):
            if not (self.repeat_last and self.steps):
                raise ScriptExhausted(f"script has {len(self.steps)} steps; call {index + 1} has none")
            index = len(self.steps) - 1
        step = self.steps[index]
        if isinstance(step, AssistantMessage):
            return ResponseCompletedEvent(step)
        if isinstance(step, ResponseCompletedEvent):
            return step
        produced = step(request)
        reply = await produced if inspect.isawaitable(produced) else produced
        if isinstance(reply, AssistantMessage):
            return ResponseCompletedEvent(reply)
        if not isinstance(reply, ResponseCompletedEvent):
            raise ModelError(
                f"script step returned {type(reply).__name__}, not AssistantMessage or ResponseCompletedEvent"
            )
        return reply

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        reply = await self._next_reply(request)
        message = reply.message
        for block in message.reasoning:
            if block.text:
                yield ReasoningDeltaEvent(block.text)
        if message.content:
            words = message.content.split(" ")
            for position, word in enumerate(words):
                yield TextDeltaEvent(word if position == 0 else " " + word)
        for call in message.tool_calls:
            yield ToolCallStreamEvent(call.id, call.name)
        yield reply

"""The model interface, and ScriptedModel, an embedded model that plays a script."""

from __future__ import annotations

import inspect
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias, get_args, runtime_checkable

import attrs

from machines.values import FieldValues
from orchestrator.checks import Check, flag, number, whole
from orchestrator.checks import text as _text
from orchestrator.errors import ModelError
from orchestrator.messages import AssistantMessage, Message
from orchestrator.output import OutputType
from orchestrator.tools import ServerToolDefinition, ToolDefinition


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    return value if type(value) is tuple else tuple(value)


def _tools(value: Iterable[ToolDefinition]) -> tuple[ToolDefinition, ...]:
    return value if type(value) is tuple else tuple(value)


def _server_tools(value: Iterable[ServerToolDefinition]) -> tuple[ServerToolDefinition, ...]:
    return value if type(value) is tuple else tuple(value)


TOOL_CHOICE_MODES = ("auto", "required", "none")
"""``ModelSettings.tool_choice`` words; any other text names the one tool the model must call."""


def _stop(value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None or isinstance(value, str):
        return None if value is None else (value,)
    return tuple(value) if isinstance(value, (list, tuple)) else value  # type: ignore[return-value]


def _check_stop(where: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, tuple):
        raise TypeError(f"{where} must be a str, a list of str or None, got {type(value).__name__}")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise TypeError(f"{where}[{index}] must be a non-empty str, got {item!r}")


def _check_flag(where: str, value: object) -> None:
    if value is not None:
        flag().check(where, value)


@attrs.frozen(eq=False, repr=False)
class ModelSettings(FieldValues):
    """How the model samples an answer; None leaves a setting to the provider's default.

    ``temperature`` (0 to 2), ``top_p`` (0 to 1), ``max_tokens`` (output tokens), ``stop``
    (sequences that end the answer), ``seed``; ``tool_choice`` ``"auto"``, ``"required"``
    (some tool must be called), ``"none"`` (no tool may be), or a tool's name (that tool must be
    called); ``parallel_tool_calls`` (False: at most one call per answer); ``reasoning_effort``
    (``"minimal"``, ``"low"``, ``"medium"``, ``"high"``, as the model takes) and
    ``reasoning_budget`` (thinking tokens). Each adapter maps them to its wire fields and
    refuses (``UnsupportedSetting``) the ones its API has no field for.
    """

    temperature: float | None = attrs.field(default=None, validator=number(0, maximum=2, optional=True))
    top_p: float | None = attrs.field(default=None, validator=number(0, maximum=1, optional=True))
    max_tokens: int | None = attrs.field(default=None, validator=whole(1, optional=True))
    stop: tuple[str, ...] | None = attrs.field(default=None, converter=_stop, validator=Check(_check_stop))
    seed: int | None = attrs.field(default=None, validator=whole(optional=True))
    tool_choice: str | None = attrs.field(default=None, validator=_text(optional=True, blank=False))
    parallel_tool_calls: bool | None = attrs.field(default=None, validator=Check(_check_flag))
    reasoning_effort: str | None = attrs.field(default=None, validator=_text(optional=True, blank=False))
    reasoning_budget: int | None = attrs.field(default=None, validator=whole(-1, optional=True))

    def merged(self, over: ModelSettings | None) -> ModelSettings:
        """These settings with every setting ``over`` sets (not None) taking its place."""
        if over is None:
            return self
        changes = over.given()
        return attrs.evolve(self, **changes) if changes else self

    def given(self) -> dict[str, Any]:
        """The settings that are set (not None), by name."""
        values = {field.name: getattr(self, field.name) for field in _SETTING_FIELDS}
        return {name: value for name, value in values.items() if value is not None}

    @property
    def named_tool(self) -> str | None:
        """The tool ``tool_choice`` forces, if it names one."""
        choice = self.tool_choice
        return choice if choice is not None and choice not in TOOL_CHOICE_MODES else None


_SETTING_FIELDS = attrs.fields(ModelSettings)

#: No setting given: every provider's defaults.
DEFAULT_SETTINGS = ModelSettings()


class UnsupportedSetting(ValueError):
    """A model setting the provider's API has no field for; ``provider`` and ``setting`` name it."""

    def __init__(self, provider: str, setting: str, hint: str = "") -> None:
        message = f"{provider} does not support the model setting {setting!r}"
        super().__init__(f"{message}; {hint}" if hint else message)
        self.provider = provider
        self.setting = setting


def check_settings(model: object, settings: ModelSettings | None) -> None:
    """Raise UnsupportedSetting for a setting ``model`` declares it cannot send (its ``unsupported_settings``)."""
    if settings is None:
        return
    unsupported: Mapping[str, str] = getattr(model, "unsupported_settings", {})
    if not unsupported:
        return
    for name in settings.given():
        if name in unsupported:
            raise UnsupportedSetting(type(model).__name__, name, unsupported[name])


def _settings(value: ModelSettings | None) -> ModelSettings:
    return DEFAULT_SETTINGS if value is None else value


@attrs.frozen(eq=False, repr=False)
class ModelRequest(FieldValues):
    """What one model call receives. Fields are frozen; use ``attrs.evolve``.

    ``settings`` are the request's model settings: the agent's, with the run's and those
    ``before_model`` hooks set (``context.model_settings``) in their place. ``output``: what the
    final answer must be (its JSON Schema for providers with native structured output), or None.
    """

    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), converter=_tools)
    server_tools: tuple[ServerToolDefinition, ...] = attrs.field(default=(), converter=_server_tools)
    settings: ModelSettings = attrs.field(default=DEFAULT_SETTINGS, converter=_settings)
    output: OutputType | None = None


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

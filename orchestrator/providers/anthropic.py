"""A model on the Anthropic Messages API."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Unpack

import attrs

from orchestrator.checks import flag, whole
from orchestrator.messages import (
    AssistantMessage,
    ContentPart,
    ImagePart,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
)
from orchestrator.model import (
    DEFAULT_SETTINGS,
    ModelEvent,
    ModelRequest,
    ModelSettings,
    ReasoningDeltaEvent,
    ResponseCompletedEvent,
    TextDeltaEvent,
    ToolCallStreamEvent,
    Usage,
    check_settings,
)
from orchestrator.output import OutputType
from orchestrator.providers._http import IdleTimer, parse_arguments, post_sse
from orchestrator.providers.base import HTTPStreamingModel, ProviderSettings
from orchestrator.providers.errors import AuthenticationError, MalformedStreamError
from orchestrator.providers.fields import Fields, decode_object, stream_error
from orchestrator.providers.stops import ANTHROPIC_STOP_REASONS, normalised_stop
from orchestrator.text import SurrogateJoiner, clean_json, clean_text
from orchestrator.tools import ServerToolDefinition, ToolDefinition

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_BASE_URL",
    "AnthropicModel",
    "anthropic_messages",
    "mark_cache_breakpoints",
]

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"

#: The smallest ``budget_tokens`` the API accepts for extended thinking.
MIN_THINKING_BUDGET = 1024


def _image_block(part: ImagePart) -> dict[str, Any]:
    if part.url is not None:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    assert part.data is not None
    data = base64.b64encode(part.data).decode("ascii")
    return {"type": "image", "source": {"type": "base64", "media_type": part.media_type, "data": data}}


def _part_blocks(parts: tuple[ContentPart, ...]) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": part.text} if isinstance(part, TextPart) else _image_block(part)
        for part in parts
        if not (isinstance(part, TextPart) and not part.text)
    ]


def _user_blocks(message: UserMessage) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"type": "text", "text": message.content}] if message.content else []
    return _part_blocks(message.content)


def _reasoning_block(block: ReasoningBlock) -> dict[str, Any] | None:
    """A ``thinking`` block (text and signature) or a ``redacted_thinking`` block (data), exactly as
    they arrived; None for reasoning Anthropic did not sign (another provider's, or one cut short)."""
    if block.signature is not None:
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    if block.data is not None and block.id is None:
        return {"type": "redacted_thinking", "data": block.data}
    return None


def _assistant_blocks(message: AssistantMessage, *, thinking: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if thinking:
        blocks.extend(b for b in (_reasoning_block(r) for r in message.reasoning) if b is not None)
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        for call in message.tool_calls
    )
    return blocks


def _tool_result(message: ToolMessage) -> dict[str, Any]:
    # A result with images sends them as image blocks inside its tool_result.
    content = message.content if isinstance(message.content, str) else _part_blocks(message.content)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": content}
    if message.status is not ToolStatus.SUCCEEDED:
        block["is_error"] = True
    return block


def anthropic_messages(messages: tuple[Message, ...], *, thinking: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """The ``system`` text and the ``messages`` list for our messages.

    System messages are joined into ``system``. Consecutive messages of one
    role are merged into one turn, so the tool results of one assistant turn
    become one user turn of ``tool_result`` blocks (steering input after them
    joins that turn). Empty turns are left out. With ``thinking`` (the request
    enables it), an assistant turn starts with the signed thinking and
    redacted-thinking blocks its message kept, before its text and tool calls,
    as the API requires; without it they are left out.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            if message.content:
                system.append(message.content)
            continue
        if isinstance(message, AssistantMessage):
            role, blocks = "assistant", _assistant_blocks(message, thinking=thinking)
        elif isinstance(message, ToolMessage):
            role, blocks = "user", [_tool_result(message)]
        else:
            role, blocks = "user", _user_blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(system), turns


#: Server tools named without their version, as ``ServerToolDefinition(type="web_search")``.
SERVER_TOOL_VERSIONS: dict[str, str] = {"web_search": "web_search_20250305"}

_VERSION_SUFFIX = re.compile(r"_\d{8}$")


def server_tool(definition: ServerToolDefinition) -> dict[str, Any]:
    """``{"type": ..., "name": ..., **options}``: an unversioned known type gets its version, and
    the name defaults to the type without its date suffix (``web_search_20250305`` -> ``web_search``)."""
    kind = SERVER_TOOL_VERSIONS.get(definition.type, definition.type)
    return {"type": kind, "name": _VERSION_SUFFIX.sub("", kind), **definition.options}


def anthropic_tools(tools: tuple[ToolDefinition, ...], server_tools: tuple[ServerToolDefinition, ...]) -> list[Any]:
    """Local tools as ``input_schema`` definitions, server tools as ``server_tool`` encodes them."""
    encoded: list[Any] = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in tools
    ]
    encoded.extend(server_tool(s) for s in server_tools)
    return encoded


#: Blocks that cannot carry ``cache_control`` (the API refuses it on them).
_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}


def mark_cache_breakpoints(body: dict[str, Any]) -> None:
    """Put ``cache_control: {type: ephemeral}`` on the system prompt and on the newest message.

    The system prompt (with the tools before it) is the prefix every call of a
    session repeats; the newest message's last block ends the prefix the next
    call repeats (it appends the answer and its results after it), so that call
    reads the whole conversation so far from the cache. Two of the four
    breakpoints a request may have; thinking blocks and empty text are skipped,
    as the API refuses a breakpoint on them.
    """
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]
    turns = body.get("messages")
    if not turns:
        return
    for block in reversed(turns[-1]["content"]):
        if block.get("type") in _UNCACHEABLE or (block.get("type") == "text" and not block.get("text")):
            continue
        block["cache_control"] = dict(EPHEMERAL)
        return


#: Block types whose input streams as ``input_json_delta``.
_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
_CONTENT_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)
"""Event types that carry the response: only these reset the idle timeout."""


@attrs.define
class _Block:
    kind: str
    text: list[str] = attrs.field(factory=list)
    joiner: SurrogateJoiner = attrs.field(factory=SurrogateJoiner)
    id: str = ""
    name: str = ""
    initial: dict[str, Any] = attrs.field(factory=dict)
    stopped: bool = False
    signature: list[str] = attrs.field(factory=list)
    data: str = ""

    def reasoning(self) -> ReasoningBlock | None:
        if self.kind == "redacted_thinking":
            return ReasoningBlock(data=self.data)
        if self.kind != "thinking":
            return None
        return ReasoningBlock("".join(self.text), signature="".join(self.signature) or None)

    def call(self) -> ToolCall:
        raw = "".join(self.text)
        if not raw:
            return ToolCall(self.id, self.name, clean_json(self.initial))
        return ToolCall(self.id, self.name, *parse_arguments(raw))


class _Assembler:
    """Builds one response from Messages stream events, every field type-checked.

    A block index used twice, a delta or stop for a block that is unknown or
    already stopped, and a delta of the wrong kind for its block (``text_delta``
    outside a text block, ``input_json_delta`` outside a tool-use block,
    ``thinking_delta`` or ``signature_delta`` outside a thinking block) are
    MalformedStreamError. Unknown event and delta types are skipped, as the API
    asks of clients.
    """

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.call_ids: set[str] = set()
        self.input_tokens = 0
        self.cache_read: int | None = None
        self.cache_write: int | None = None
        self.output_tokens = 0
        self.raw_stop: str | None = None
        self.started = False
        self.stopped = False

    def feed(self, data: Fields) -> list[ModelEvent]:
        kind = data.required_text("type")
        if kind == "error":
            raise stream_error(data.raw("error") or "stream error", body=repr(data.data)[:2000])
        if kind == "ping":
            return []
        if kind == "message_start":
            if self.started:
                raise MalformedStreamError("a second message_start")
            self.started = True
            self._usage(data.obj("message").obj("usage"))
            return []
        if not self.started:
            raise MalformedStreamError(f"{kind} event before message_start")
        if kind == "content_block_start":
            return self._start(data)
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "content_block_stop":
            return self._stop(self._open_block(data))
        if kind == "message_delta":
            self._usage(data.obj("usage"))
            raw_stop = data.obj("delta").text("stop_reason")
            if raw_stop:
                self.raw_stop = clean_text(raw_stop)
        elif kind == "message_stop":
            self.stopped = True
            return [event for index in sorted(self.blocks) for event in self._stop(self.blocks[index])]
        return []

    def _start(self, data: Fields) -> list[ModelEvent]:
        index = data.required_index("index")
        if index in self.blocks:
            raise MalformedStreamError(f"content block {index} started twice")
        content = data.obj("content_block")
        kind = content.required_text("type")
        block = self.blocks[index] = _Block(kind)
        if kind in _INPUT_BLOCKS:
            block.name = clean_text(content.text("name") or "")
            initial = content.obj("input")
            block.initial = dict(initial.data)
        if kind == "tool_use":
            call_id = content.identifier("id")
            if call_id is None:
                raise content.wrong("id", "a non-empty string or a number")
            if call_id in self.call_ids:
                raise MalformedStreamError(f"two tool calls have the id {call_id!r}")
            self.call_ids.add(call_id)
            block.id = call_id
        if kind == "text":
            return self._text(block, content.text("text") or "")
        if kind == "thinking":
            block.signature.append(content.text("signature") or "")
            return self._text(block, content.text("thinking") or "", ReasoningDeltaEvent)
        if kind == "redacted_thinking":
            block.data = content.required_text("data")
        return []

    def _open_block(self, data: Fields) -> _Block:
        index = data.required_index("index")
        block = self.blocks.get(index)
        if block is None:
            raise MalformedStreamError(f"{data.raw('type')} for unknown content block {index}")
        if block.stopped:
            raise MalformedStreamError(f"{data.raw('type')} for content block {index}, which already stopped")
        return block

    def _delta(self, data: Fields) -> list[ModelEvent]:
        block = self._open_block(data)
        delta = data.obj("delta")
        kind = delta.text("type")
        if kind == "text_delta":
            if block.kind != "text":
                raise MalformedStreamError(f"text_delta for a {block.kind} block")
            return self._text(block, delta.required_text("text"))
        if kind == "input_json_delta":
            if block.kind not in _INPUT_BLOCKS:
                raise MalformedStreamError(f"input_json_delta for a {block.kind} block")
            block.text.append(delta.required_text("partial_json"))
        elif kind in ("thinking_delta", "signature_delta"):
            if block.kind != "thinking":
                raise MalformedStreamError(f"{kind} for a {block.kind} block")
            if kind == "thinking_delta":
                return self._text(block, delta.required_text("thinking"), ReasoningDeltaEvent)
            block.signature.append(delta.required_text("signature"))
        return []

    @staticmethod
    def _text(
        block: _Block, text: str, event: type[TextDeltaEvent | ReasoningDeltaEvent] = TextDeltaEvent
    ) -> list[ModelEvent]:
        piece = block.joiner.feed(text)
        if not piece:
            return []
        block.text.append(piece)
        return [event(piece)]

    def _stop(self, block: _Block) -> list[ModelEvent]:
        if block.stopped:
            return []
        block.stopped = True
        if block.kind == "text":
            return self._text(block, block.joiner.flush())
        if block.kind == "thinking":
            return self._text(block, block.joiner.flush(), ReasoningDeltaEvent)
        if block.kind == "tool_use":
            return [ToolCallStreamEvent(block.id, block.name)]
        return []

    def _usage(self, usage: Fields) -> None:
        """Counts as they are reported (``message_delta`` repeats them cumulatively, or leaves them out)."""
        if usage.has("input_tokens"):
            self.input_tokens = usage.count("input_tokens")
        if usage.has("cache_read_input_tokens"):
            self.cache_read = usage.count("cache_read_input_tokens")
        if usage.has("cache_creation_input_tokens"):
            self.cache_write = usage.count("cache_creation_input_tokens")
        if usage.has("output_tokens"):
            self.output_tokens = usage.count("output_tokens")

    def usage(self) -> Usage:
        """Input counts every input token: Anthropic reports the cached ones beside ``input_tokens``."""
        total = self.input_tokens + (self.cache_read or 0) + (self.cache_write or 0)
        return Usage(total, self.output_tokens, self.cache_read, self.cache_write)

    def completed(self) -> ResponseCompletedEvent:
        ordered = [self.blocks[index] for index in sorted(self.blocks)]
        text = "".join("".join(b.text) for b in ordered if b.kind == "text")
        calls = tuple(b.call() for b in ordered if b.kind == "tool_use")
        reasoning = tuple(r for r in (b.reasoning() for b in ordered) if r is not None)
        message = AssistantMessage(text, calls, reasoning=reasoning)
        stop = normalised_stop(self.raw_stop, ANTHROPIC_STOP_REASONS, has_calls=bool(calls))
        return ResponseCompletedEvent(message, self.usage(), stop, self.raw_stop)


_ANTHROPIC_CHOICES = {"auto": "auto", "required": "any", "none": "none"}


def anthropic_settings(settings: ModelSettings, *, tools: bool) -> dict[str, Any]:
    """The Messages API fields of ``settings`` other than ``max_tokens`` and ``thinking``."""
    fields: dict[str, Any] = {}
    if settings.temperature is not None:
        fields["temperature"] = settings.temperature
    if settings.top_p is not None:
        fields["top_p"] = settings.top_p
    if settings.stop is not None:
        fields["stop_sequences"] = list(settings.stop)
    if not tools:
        return fields
    choice: dict[str, Any] | None = None
    if settings.tool_choice is not None:
        named = settings.named_tool
        choice = {"type": "tool", "name": named} if named else {"type": _ANTHROPIC_CHOICES[settings.tool_choice]}
    if settings.parallel_tool_calls is False and (choice is None or choice["type"] != "none"):
        choice = {"type": "auto", **(choice or {}), "disable_parallel_tool_use": True}
    if choice is not None:
        fields["tool_choice"] = choice
    return fields


#: The tool a request with an output type offers for its final answer.
OUTPUT_TOOL = "final_result"


def output_tool(output: OutputType) -> dict[str, Any]:
    """The definition of the tool whose input is the final answer."""
    return {
        "name": OUTPUT_TOOL,
        "description": f"Give the final answer: a {output.name}. Call this once, when the answer is ready.",
        "input_schema": output.object_schema(),
    }


def answer_of_output_tool(completed: ResponseCompletedEvent, output: OutputType | None) -> ResponseCompletedEvent:
    """A response that called the output tool as the answer: the tool's input (as JSON) is its text.

    Other calls of that response are dropped: the answer ends the request.
    """
    if output is None:
        return completed
    message = completed.message
    call = next((c for c in message.tool_calls if c.name == OUTPUT_TOOL), None)
    if call is None:
        return completed
    given = call.invalid_arguments if call.invalid_arguments is not None else json.dumps(call.arguments)
    answer = AssistantMessage(output.unwrapped(given), reasoning=message.reasoning)
    return ResponseCompletedEvent(answer, completed.usage, "end_turn", completed.raw_stop_reason)


class AnthropicModel(HTTPStreamingModel):
    """Streams responses from the Anthropic Messages API.

    ``model`` defaults to ``$ANTHROPIC_MODEL``, ``api_key`` to
    ``$ANTHROPIC_API_KEY`` and ``base_url`` to ``$ANTHROPIC_BASE_URL`` (else
    the Anthropic API, where a key is required). ``extra_body`` is merged into
    every request (``temperature``, ``top_k``, ...). Once a stream has
    started, ``idle_timeout`` seconds without a content event (``ping`` and
    event types the adapter ignores do not count) raise ProviderTimeoutError;
    None waits without bound.

    ``thinking_budget`` turns extended thinking on (``thinking: {type:
    enabled, budget_tokens}``; at least 1024 and below ``max_tokens``): the
    thinking streams as reasoning deltas, and its signed blocks are kept in
    the assistant message and sent back before its tool calls on later turns.
    ``prompt_caching`` (on by default) marks the system prompt and the newest
    message as cache breakpoints (see ``mark_cache_breakpoints``).

    A request's ModelSettings are sent as ``temperature``, ``top_p``, ``max_tokens`` (in place of
    the constructor's), ``stop_sequences``, ``thinking`` (``reasoning_budget`` as its
    ``budget_tokens``) and, when tools are offered, ``tool_choice`` (``required`` is ``any``, a
    tool's name ``{type: tool, name}``; ``parallel_tool_calls=False`` sets its
    ``disable_parallel_tool_use``); ``seed`` and ``reasoning_effort`` are refused (UnsupportedSetting).
    A request with an output type offers a ``final_result`` tool whose input schema is the
    output's and forces it (``tool_choice`` ``{type: tool}``, or ``any`` beside other tools; not
    with thinking on, nor when a ``tool_choice`` setting is given): its input becomes the answer's text.
    """

    env_prefix: ClassVar[str] = "ANTHROPIC"
    default_base_url: ClassVar[str] = DEFAULT_ANTHROPIC_BASE_URL
    unsupported_settings: ClassVar[Mapping[str, str]] = {
        "seed": "the Messages API has no seed",
        "reasoning_effort": "the Messages API takes a thinking budget: use reasoning_budget",
    }

    def __init__(
        self,
        model: str | None = None,
        *,
        max_tokens: int = 4096,
        thinking_budget: int | None = None,
        prompt_caching: bool = True,
        **settings: Unpack[ProviderSettings],
    ) -> None:
        whole(1).check("AnthropicModel.max_tokens", max_tokens)
        flag().check("AnthropicModel.prompt_caching", prompt_caching)
        if thinking_budget is not None:
            whole().check("AnthropicModel.thinking_budget", thinking_budget)
            if not MIN_THINKING_BUDGET <= thinking_budget < max_tokens:
                raise ValueError(
                    f"thinking_budget must be at least {MIN_THINKING_BUDGET} and below max_tokens ({max_tokens}), "
                    f"not {thinking_budget}"
                )
        super().__init__(model, **settings)
        self.max_tokens = max_tokens
        self.thinking_budget = thinking_budget
        self.prompt_caching = prompt_caching

    def thinking(self, settings: ModelSettings = DEFAULT_SETTINGS) -> dict[str, Any] | None:
        """The ``thinking`` setting requests carry (``extra_body`` may give its own)."""
        given = self.extra_body.get("thinking")
        if given is not None:
            return dict(given) if isinstance(given, Mapping) else None
        budget = settings.reasoning_budget if settings.reasoning_budget is not None else self.thinking_budget
        if budget is None:
            return None
        if budget <= 0:
            return {"type": "disabled"}
        return {"type": "enabled", "budget_tokens": budget}

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        settings = request.settings
        check_settings(self, settings)
        thinking = self.thinking(settings)
        thinking_on = thinking is not None and thinking.get("type") not in (None, "disabled")
        system, messages = anthropic_messages(request.messages, thinking=thinking_on)
        max_tokens = settings.max_tokens or self.max_tokens
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "stream": True}
        if system:
            body["system"] = system
        body["messages"] = messages
        output = request.output
        if request.tools or request.server_tools:
            body["tools"] = anthropic_tools(request.tools, request.server_tools)
        if output is not None:
            body.setdefault("tools", []).append(output_tool(output))
        if thinking is not None:
            body["thinking"] = thinking
        fields = anthropic_settings(settings, tools=bool(request.tools or request.server_tools or output))
        if output is not None and settings.tool_choice is None and not thinking_on:
            # The answer must come through the output tool (or, with other tools offered, any tool).
            forced = {"type": "any"} if request.tools or request.server_tools else {"type": "tool", "name": OUTPUT_TOOL}
            fields["tool_choice"] = {**fields.get("tool_choice", {}), **forced}
        body.update(fields)
        if self.prompt_caching:
            mark_cache_breakpoints(body)
        body.update(self.extra_body)
        return body

    def headers(self) -> dict[str, str]:
        if self.needs_key:
            raise AuthenticationError("no Anthropic API key: pass api_key= or set ANTHROPIC_API_KEY")
        headers = {"anthropic-version": ANTHROPIC_VERSION, "Accept": "text/event-stream"}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        headers = self.headers()
        assembler = _Assembler()
        url = f"{self.base_url}/v1/messages"
        idle = IdleTimer(self.idle_timeout, url)
        async with aclosing(post_sse(self.client, url, self.body(request), headers, self.timeout)) as events:
            while (event := await idle.next(events)) is not None:
                data = decode_object(event.data)
                kind = data.raw("type")
                if isinstance(kind, str) and kind in _CONTENT_EVENTS:  # not ping, nor a type it ignores
                    idle.reset()
                for produced in assembler.feed(data):
                    if type(produced) is ToolCallStreamEvent and produced.name == OUTPUT_TOOL and request.output:
                        continue  # the answer, not a call to run
                    yield produced
                if assembler.stopped:
                    break
            else:
                raise MalformedStreamError("stream ended before message_stop")
        yield answer_of_output_tool(assembler.completed(), request.output)

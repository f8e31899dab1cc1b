"""A model on the OpenAI Chat Completions API, or any server that speaks it."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Unpack

import attrs

from orchestrator.checks import flag
from orchestrator.checks import text as _text
from orchestrator.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    describe_parts,
    images_of,
)
from orchestrator.model import (
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
from orchestrator.providers._http import IdleTimer, parse_arguments, post_sse
from orchestrator.providers.base import HTTPStreamingModel, ProviderSettings, unwrapped_answer
from orchestrator.providers.errors import AuthenticationError, MalformedStreamError
from orchestrator.providers.fields import Fields, decode_object, stream_error
from orchestrator.providers.stops import OPENAI_FINISH_REASONS, normalised_stop
from orchestrator.text import SurrogateJoiner, clean_text
from orchestrator.tools import ToolDefinition

__all__ = ["DEFAULT_OPENAI_BASE_URL", "OpenAIChatModel", "openai_messages", "openai_tools"]

log = logging.getLogger("orchestrator.providers")

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"


def image_url(part: ImagePart) -> str:
    """The part's URL, or its bytes as a ``data:`` URL."""
    if part.url is not None:
        return part.url
    assert part.data is not None
    return f"data:{part.media_type};base64,{base64.b64encode(part.data).decode('ascii')}"


def _user_content(message: UserMessage) -> str | list[dict[str, Any]]:
    if isinstance(message.content, str):
        return message.content
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        else:
            parts.append({"type": "image_url", "image_url": {"url": image_url(part)}})
    return parts


def _encoded_arguments(call: ToolCall) -> str:
    if call.invalid_arguments is not None:
        return call.invalid_arguments
    return json.dumps(call.arguments, ensure_ascii=False)


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": _user_content(message)}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": describe_parts(message.content)}
    encoded: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        encoded["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _encoded_arguments(c)}}
            for c in message.tool_calls
        ]
    return encoded


def _tool_images(results: list[ToolMessage]) -> dict[str, Any]:
    """One user message showing the images of ``results``, each group introduced by the call it came from."""
    parts: list[dict[str, Any]] = []
    for result in results:
        parts.append({"type": "text", "text": f"Images returned by tool call {result.tool_call_id} ({result.name}):"})
        parts.extend({"type": "image_url", "image_url": {"url": image_url(part)}} for part in images_of(result.content))
    return {"role": "user", "content": parts}


def openai_messages(messages: tuple[Message, ...], *, tool_images: bool = True) -> list[dict[str, Any]]:
    """Our messages in Chat Completions form.

    A tool message takes only text, so a result with images says ``[image: ...]``
    where each image was (``describe_parts``), and with ``tool_images`` the
    images themselves follow all the results of that turn in one user message
    (a user message between the results of one turn would be refused).
    """
    encoded: list[dict[str, Any]] = []
    with_images: list[ToolMessage] = []
    for message in messages:
        if with_images and not isinstance(message, ToolMessage):
            encoded.append(_tool_images(with_images))
            with_images = []
        encoded.append(_message(message))
        if tool_images and isinstance(message, ToolMessage) and images_of(message.content):
            with_images.append(message)
    if with_images:
        encoded.append(_tool_images(with_images))
    return encoded


def openai_tools(tools: tuple[ToolDefinition, ...]) -> list[dict[str, Any]]:
    """Tool definitions in Chat Completions ``function`` form."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in tools
    ]


@attrs.define
class _PendingCall:
    id: str | None
    name: str = ""
    arguments: list[str] = attrs.field(factory=list)
    announced: bool = False


class _Assembler:
    """Builds one response from Chat Completions chunks, every field type-checked.

    Tool-call fragments are grouped by their ``index``; a fragment without one
    continues the call its ``id`` names, or else the call streamed last (a new
    ``id`` starts a new call), so a server that leaves ``index`` out does not
    split one call into several.
    """

    def __init__(self) -> None:
        self.text: list[str] = []
        self.joiner = SurrogateJoiner()
        self.reasoning: list[str] = []
        self.reasoning_joiner = SurrogateJoiner()
        self.raw_stop: str | None = None
        self.refused = False
        self.calls: dict[int, _PendingCall] = {}
        self.latest: int | None = None
        self.announced_ids: set[str] = set()
        self.usage: Usage | None = None
        self.finished = False
        self.saw_choice = False
        self.carried_content = False
        """Whether the chunk fed last carried anything: a non-empty delta field (text, a tool-call
        fragment, reasoning, fields the adapter does not read), a finish, usage."""

    def _announce(self, index: int) -> ToolCallStreamEvent:
        call = self.calls[index]
        if call.id is None:
            raise MalformedStreamError(f"tool call {index} ({call.name or 'unnamed'}) has no id")
        if call.id in self.announced_ids:
            raise MalformedStreamError(f"two tool calls have the id {call.id!r}")
        call.announced = True
        self.announced_ids.add(call.id)
        return ToolCallStreamEvent(call.id, clean_text(call.name))

    def announce(self, below: int | None = None) -> list[ModelEvent]:
        """ToolCallStreamEvents for calls now complete (all, or those indexed below ``below``)."""
        return [
            self._announce(index)
            for index in sorted(self.calls)
            if not self.calls[index].announced and (below is None or index < below)
        ]

    def feed(self, chunk: Fields) -> list[ModelEvent]:
        choices = list(chunk.objects("choices"))
        if chunk.has("error") and not choices:
            raise stream_error(chunk.raw("error"))
        events: list[ModelEvent] = []
        usage = chunk.obj("usage")
        self.carried_content = bool(usage)
        if usage:
            self.usage = self._usage(usage)
        for choice in choices:
            if (choice.index("index") or 0) != 0:
                continue
            self.saw_choice = True
            delta = choice.obj("delta")
            if any(value for key, value in delta.data.items() if key != "role"):
                self.carried_content = True  # also what this adapter does not read
            thought = _reasoning_text(delta)
            if thought:
                events.extend(self._reasoning(self.reasoning_joiner.feed(thought)))
            content = delta.text("content")
            if content:
                self.carried_content = True
                events.extend(self._text(self.joiner.feed(content)))
            refusal = delta.text("refusal")
            if refusal:  # the model declined: its words are the answer's text
                self.refused = True
                events.extend(self._text(self.joiner.feed(refusal)))
            for fragment in delta.objects("tool_calls"):
                self.carried_content = True
                events.extend(self._tool_fragment(fragment))
            finish_reason = choice.text("finish_reason")
            if finish_reason:
                self.carried_content = True
                self.finished = True
                self.raw_stop = clean_text(finish_reason)
                events.extend(self._reasoning(self.reasoning_joiner.flush()))
                events.extend(self._text(self.joiner.flush()))
                events.extend(self.announce())
        return events

    @staticmethod
    def _usage(usage: Fields) -> Usage:
        """Prompt tokens include the cached ones, reported in ``prompt_tokens_details.cached_tokens``."""
        details = usage.obj("prompt_tokens_details")
        cached = details.count("cached_tokens") if details.has("cached_tokens") else None
        return Usage(usage.count("prompt_tokens"), usage.count("completion_tokens"), cache_read_tokens=cached)

    def _reasoning(self, piece: str) -> list[ModelEvent]:
        if not piece:
            return []
        self.reasoning.append(piece)
        return [ReasoningDeltaEvent(piece)]

    def _text(self, piece: str) -> list[ModelEvent]:
        if not piece:
            return []
        self.text.append(piece)
        return [TextDeltaEvent(piece)]

    def _position(self, fragment: Fields, call_id: str | None) -> int:
        index = fragment.index("index")
        if index is not None:
            return index
        if call_id is not None:
            for known, call in self.calls.items():
                if call.id == call_id:
                    return known
            return max(self.calls, default=-1) + 1
        return self.latest if self.latest is not None else 0

    def _tool_fragment(self, fragment: Fields) -> list[ModelEvent]:
        call_id = fragment.identifier("id")
        index = self._position(fragment, call_id)
        function = fragment.obj("function")
        name = function.text("name")
        arguments = function.text("arguments")
        events = self.announce(below=index) if index not in self.calls else []
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = _PendingCall(call_id)
        elif call_id is not None and call.id != call_id:
            if call.id is not None or call.announced:
                raise MalformedStreamError(f"tool call {index} changed its id from {call.id!r} to {call_id!r}")
            call.id = call_id
        if call.announced and name:
            raise MalformedStreamError(f"tool call {index} was renamed after it was announced")
        self.latest = index
        if name:
            call.name += name
        if arguments:
            call.arguments.append(arguments)
        return events

    def finish(self) -> list[ModelEvent]:
        """The text held back and the calls not yet announced, at the end of the stream."""
        return self._reasoning(self.reasoning_joiner.flush()) + self._text(self.joiner.flush()) + self.announce()

    def completed(self) -> ResponseCompletedEvent:
        calls = tuple(
            ToolCall(str(call.id), clean_text(call.name), *parse_arguments("".join(call.arguments)))
            for call in (self.calls[index] for index in sorted(self.calls))
        )
        reasoning = (ReasoningBlock("".join(self.reasoning)),) if self.reasoning else ()
        message = AssistantMessage("".join(self.text), calls, reasoning=reasoning)
        stop = normalised_stop(self.raw_stop, OPENAI_FINISH_REASONS, has_calls=bool(calls))
        if self.refused and stop in (None, "end_turn"):
            stop = "refusal"
        return ResponseCompletedEvent(message, self.usage, stop, self.raw_stop)


def _reasoning_text(delta: Fields) -> str | None:
    """Reasoning text some compatible servers stream beside the content: ``reasoning_content``
    (a string, else MalformedStreamError), or else ``reasoning`` when it is a string (servers use
    that name for other shapes too, which are left alone)."""
    official = delta.text("reasoning_content")
    if official is not None:
        return official
    alias = delta.raw("reasoning")
    return alias if isinstance(alias, str) else None


def chat_settings(settings: ModelSettings, *, tools: bool) -> dict[str, Any]:
    """The Chat Completions fields of ``settings``; tool_choice and parallel_tool_calls only when tools are offered."""
    fields: dict[str, Any] = {}
    for name, wire in _CHAT_FIELDS:
        value = getattr(settings, name)
        if value is not None:
            fields[wire] = list(value) if isinstance(value, tuple) else value
    if tools and settings.tool_choice is not None:
        named = settings.named_tool
        fields["tool_choice"] = {"type": "function", "function": {"name": named}} if named else settings.tool_choice
    if tools and settings.parallel_tool_calls is not None:
        fields["parallel_tool_calls"] = settings.parallel_tool_calls
    return fields


#: ModelSettings fields and the Chat Completions fields they are sent as, value unchanged.
_CHAT_FIELDS = (
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("max_tokens", "max_completion_tokens"),
    ("stop", "stop"),
    ("seed", "seed"),
    ("reasoning_effort", "reasoning_effort"),
)


def openai_headers(model: HTTPStreamingModel) -> dict[str, str]:
    """The headers of a streamed call to an OpenAI endpoint (Chat Completions or Responses) of ``model``.

    AuthenticationError without a key for OpenAI's own endpoint; a compatible or
    local server (another base URL) may need none.
    """
    if model.needs_key:
        raise AuthenticationError(
            "no OpenAI API key: pass api_key= or set OPENAI_API_KEY "
            "(a compatible or local server needs only base_url= or OPENAI_BASE_URL)"
        )
    headers = {"Accept": "text/event-stream"}
    if model.api_key:
        headers["Authorization"] = f"Bearer {model.api_key}"
    return headers


class OpenAIChatModel(HTTPStreamingModel):
    """Streams Chat Completions from OpenAI or an OpenAI-compatible server.

    ``model`` defaults to ``$OPENAI_MODEL``, ``api_key`` to ``$OPENAI_API_KEY``
    and ``base_url`` to ``$OPENAI_BASE_URL`` (else the OpenAI API). With the
    default base URL a key is required; a custom server may need none
    (``api_key=""`` sends no Authorization header). ``extra_body`` is merged
    into every request (``temperature``, ``max_tokens``, ...). Once a stream
    has started, ``idle_timeout`` seconds without a chunk that carries content
    (keepalive comments and chunks with nothing in them do not count) raise
    ProviderTimeoutError; None waits without bound.

    ``reasoning_effort`` is sent as it is (``minimal``, ``low``, ``medium``,
    ``high``, ... as the model accepts). A request's ModelSettings are sent as
    ``temperature``, ``top_p``, ``max_completion_tokens``, ``stop``, ``seed``,
    ``reasoning_effort`` and, when tools are offered, ``tool_choice`` and
    ``parallel_tool_calls`` (``extra_body`` fields take their place); a
    ``reasoning_budget`` is refused (UnsupportedSetting). A request with an output type
    sends its schema as ``response_format`` (``json_schema``, not strict); a schema that is not
    an object's is sent as the ``value`` property of one, and the answer unwrapped. Reasoning text a server streams
    (``reasoning_content``, or ``reasoning``) becomes reasoning deltas and a
    ReasoningBlock of the message; it is not sent back (Chat Completions has no
    field for it). ``tool_images=False`` sends only the text descriptions of
    tool result images (for a model that takes no images), not the user message
    that shows them.
    """

    env_prefix: ClassVar[str] = "OPENAI"
    default_base_url: ClassVar[str] = DEFAULT_OPENAI_BASE_URL
    unsupported_settings: ClassVar[Mapping[str, str]] = {
        "reasoning_budget": "Chat Completions takes reasoning_effort, not a token budget"
    }

    def __init__(
        self,
        model: str | None = None,
        *,
        reasoning_effort: str | None = None,
        tool_images: bool = True,
        **settings: Unpack[ProviderSettings],
    ) -> None:
        _text(optional=True, blank=False).check("OpenAIChatModel.reasoning_effort", reasoning_effort)
        flag().check("OpenAIChatModel.tool_images", tool_images)
        self.tool_images = tool_images
        super().__init__(model, **settings)
        self.reasoning_effort = reasoning_effort

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": openai_messages(request.messages, tool_images=self.tool_images),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = openai_tools(request.tools)
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        check_settings(self, request.settings)
        body.update(chat_settings(request.settings, tools=bool(request.tools)))
        if request.output is not None:
            schema = {"name": request.output.wire_name, "schema": request.output.object_schema(), "strict": False}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        if request.server_tools:
            log.warning("Chat Completions has no server tools; ignoring %d", len(request.server_tools))
        body.update(self.extra_body)
        return body

    def headers(self) -> dict[str, str]:
        return openai_headers(self)

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        headers = self.headers()
        assembler = _Assembler()
        url = f"{self.base_url}/chat/completions"
        idle = IdleTimer(self.idle_timeout, url)
        async with aclosing(post_sse(self.client, url, self.body(request), headers, self.timeout)) as events:
            while (event := await idle.next(events)) is not None:
                if event.data.strip() == "[DONE]":
                    if not assembler.saw_choice:
                        raise MalformedStreamError("stream ended (data: [DONE]) before any choice")
                    break
                produced_events = assembler.feed(decode_object(event.data))
                # Keepalive comments never become events; a chunk that carries nothing
                # (an empty delta, no choices) is a keepalive too and leaves the timer running.
                if assembler.carried_content:
                    idle.reset()
                for produced in produced_events:
                    yield produced
            else:
                # The official SDK stops at the end of the body too; some compatible servers omit
                # [DONE]. A response whose finish_reason arrived is complete; anything else was cut.
                if not assembler.finished:
                    raise MalformedStreamError("stream ended before a finish_reason or data: [DONE]")
                log.debug("stream from %s ended after its finish_reason without data: [DONE]", url)
        for produced in assembler.finish():
            yield produced
        yield unwrapped_answer(assembler.completed(), request.output)

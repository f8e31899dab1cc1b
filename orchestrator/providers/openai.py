"""A model on the OpenAI Chat Completions API, or any server that speaks it."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from orchestrator.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from orchestrator.model import (
    ModelEvent,
    ModelRequest,
    ResponseCompletedEvent,
    TextDeltaEvent,
    ToolCallStreamEvent,
    Usage,
)
from orchestrator.providers._http import MALFORMED, decode, parse_arguments, post_sse
from orchestrator.providers.base import HTTPStreamingModel
from orchestrator.providers.errors import AuthenticationError, MalformedStreamError, error_from_type
from orchestrator.providers.retry import RetryPolicy, Sleep
from orchestrator.tools import ToolDefinition

if TYPE_CHECKING:
    import httpx

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
    if set(call.arguments) == {MALFORMED}:
        return str(call.arguments[MALFORMED])
    return json.dumps(call.arguments, ensure_ascii=False)


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": _user_content(message)}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    encoded: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        encoded["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _encoded_arguments(c)}}
            for c in message.tool_calls
        ]
    return encoded


def openai_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Our messages in Chat Completions form."""
    return [_message(message) for message in messages]


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
    id: str
    name: str = ""
    arguments: list[str] = attrs.field(factory=list)
    announced: bool = False

    def finished(self) -> ToolCall:
        return ToolCall(self.id, self.name, parse_arguments("".join(self.arguments)))


class _Assembler:
    """Builds one response from Chat Completions chunks."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, _PendingCall] = {}
        self.usage: Usage | None = None
        self.finished = False

    def announce(self, below: int | None = None) -> list[ModelEvent]:
        """ToolCallStreamEvents for calls now complete (all, or those indexed below ``below``)."""
        events: list[ModelEvent] = []
        for index in sorted(self.calls):
            call = self.calls[index]
            if call.announced or (below is not None and index >= below):
                continue
            call.announced = True
            events.append(ToolCallStreamEvent(call.id, call.name))
        return events

    def feed(self, chunk: dict[str, Any]) -> list[ModelEvent]:
        if "error" in chunk and not chunk.get("choices"):
            error = chunk["error"]
            if isinstance(error, dict):
                raise error_from_type(error.get("type") or error.get("code"), str(error.get("message", error)))
            raise error_from_type(None, str(error))
        events: list[ModelEvent] = []
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                self.text.append(content)
                events.append(TextDeltaEvent(content))
            for fragment in delta.get("tool_calls") or ():
                events.extend(self._tool_fragment(fragment))
            if choice.get("finish_reason"):
                self.finished = True
                events.extend(self.announce())
        return events

    def _tool_fragment(self, fragment: dict[str, Any]) -> list[ModelEvent]:
        index = int(fragment.get("index", len(self.calls)))
        events = self.announce(below=index) if index not in self.calls else []
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = _PendingCall(fragment.get("id") or f"call_{uuid.uuid4().hex[:24]}")
        elif fragment.get("id"):
            call.id = fragment["id"]
        function = fragment.get("function") or {}
        if function.get("name"):
            call.name += function["name"]
        if function.get("arguments"):
            call.arguments.append(function["arguments"])
        return events

    def completed(self) -> ResponseCompletedEvent:
        calls = tuple(self.calls[index].finished() for index in sorted(self.calls))
        return ResponseCompletedEvent(AssistantMessage("".join(self.text), calls), self.usage)


class OpenAIChatModel(HTTPStreamingModel):
    """Streams Chat Completions from OpenAI or an OpenAI-compatible server.

    ``model`` defaults to ``$OPENAI_MODEL``, ``api_key`` to ``$OPENAI_API_KEY``
    and ``base_url`` to ``$OPENAI_BASE_URL`` (else the OpenAI API). With the
    default base URL a key is required; a custom server may need none
    (``api_key=""`` sends no Authorization header). ``extra_body`` is merged
    into every request (``temperature``, ``max_tokens``, ...).
    """

    env_prefix: ClassVar[str] = "OPENAI"
    default_base_url: ClassVar[str] = DEFAULT_OPENAI_BASE_URL

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        extra_body: Mapping[str, Any] | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            client=client,
            max_retries=max_retries,
            timeout=timeout,
            retry=retry,
            extra_body=extra_body,
            sleep=sleep,
        )

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": openai_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = openai_tools(request.tools)
        if request.server_tools:
            log.warning("Chat Completions has no server tools; ignoring %d", len(request.server_tools))
        body.update(self.extra_body)
        return body

    def headers(self) -> dict[str, str]:
        if self.needs_key:
            raise AuthenticationError(
                "no OpenAI API key: pass api_key= or set OPENAI_API_KEY "
                "(a local server needs only base_url= or OPENAI_BASE_URL)"
            )
        headers = {"Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        headers = self.headers()
        assembler = _Assembler()
        url = f"{self.base_url}/chat/completions"
        async with aclosing(post_sse(self.client, url, self.body(request), headers, self.timeout)) as events:
            async for event in events:
                if event.data.strip() == "[DONE]":
                    break
                for produced in assembler.feed(decode(event)):
                    yield produced
            else:
                # The official SDK stops at the end of the body too; some compatible servers omit
                # [DONE]. A response whose finish_reason arrived is complete; anything else was cut.
                if not assembler.finished:
                    raise MalformedStreamError("stream ended before a finish_reason or data: [DONE]")
                log.debug("stream from %s ended after its finish_reason without data: [DONE]", url)
        for produced in assembler.announce():
            yield produced
        yield assembler.completed()

"""A model on the OpenAI Responses API (``POST /v1/responses``), or any server that speaks it."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Unpack

from orchestrator.checks import text as _text
from orchestrator.messages import (
    AssistantMessage,
    ContentPart,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from orchestrator.model import ModelEvent, ModelRequest, check_settings
from orchestrator.providers._http import IdleTimer, post_sse
from orchestrator.providers.base import HTTPStreamingModel, ProviderSettings, unwrapped_answer
from orchestrator.providers.errors import MalformedStreamError
from orchestrator.providers.fields import decode_object
from orchestrator.providers.openai import DEFAULT_OPENAI_BASE_URL, image_url, openai_headers
from orchestrator.providers.responses_stream import ResponsesAssembler
from orchestrator.tools import ServerToolDefinition, ToolDefinition

__all__ = ["OpenAIResponsesModel", "responses_input", "responses_tools"]

log = logging.getLogger("orchestrator.providers")


def _content(content: str | tuple[ContentPart, ...]) -> str | list[dict[str, Any]]:
    """Text as it is; parts as ``input_text`` and ``input_image`` items (bytes as data URLs)."""
    if isinstance(content, str):
        return content
    return [
        {"type": "input_text", "text": part.text}
        if isinstance(part, TextPart)
        else {"type": "input_image", "image_url": image_url(part), "detail": "auto"}
        for part in content
    ]


def _arguments_text(arguments: Mapping[str, Any], invalid: str | None) -> str:
    return invalid if invalid is not None else json.dumps(dict(arguments), ensure_ascii=False)


def _reasoning_item(block: ReasoningBlock) -> dict[str, Any] | None:
    """A reasoning item to send back, for a block this API produced: one with an id and no
    signature (signatures belong to other providers' reasoning)."""
    if block.id is None or block.signature is not None:
        return None
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": block.id,
        "summary": [{"type": "summary_text", "text": block.text}] if block.text else [],
    }
    if block.data is not None:
        item["encrypted_content"] = block.data
    return item


def _assistant_items(message: AssistantMessage) -> list[dict[str, Any]]:
    items = [item for item in map(_reasoning_item, message.reasoning) if item is not None]
    if message.content:
        items.append({"role": "assistant", "content": message.content})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": _arguments_text(call.arguments, call.invalid_arguments),
        }
        for call in message.tool_calls
    )
    return items


def _tool_output(message: ToolMessage) -> dict[str, Any]:
    """A result as ``function_call_output``: its text, or its parts (images included) as a list."""
    return {"type": "function_call_output", "call_id": message.tool_call_id, "output": _content(message.content)}


def responses_input(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Our messages as Responses ``input`` items, in order.

    System text becomes a ``system`` message; an assistant message becomes its
    reasoning items (those this API produced), its text, then one
    ``function_call`` item per call; a tool result becomes a ``function_call_output``
    (one with images gets them as ``input_image`` items of its output).
    """
    items: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            items.append({"role": "system", "content": message.content})
        elif isinstance(message, UserMessage):
            items.append({"role": "user", "content": _content(message.content)})
        elif isinstance(message, ToolMessage):
            items.append(_tool_output(message))
        else:
            items.extend(_assistant_items(message))
    return items


def responses_tools(
    tools: tuple[ToolDefinition, ...], server_tools: tuple[ServerToolDefinition, ...] = ()
) -> list[dict[str, Any]]:
    """Local tools as ``function`` tools (``strict`` off: any JSON schema is accepted), server
    tools as ``{"type": ..., **options}`` (``web_search``, ``file_search``, ...)."""
    encoded: list[dict[str, Any]] = [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": dict(t.parameters),
            "strict": False,
        }
        for t in tools
    ]
    encoded.extend({"type": s.type, **s.options} for s in server_tools)
    return encoded


class OpenAIResponsesModel(HTTPStreamingModel):
    """Streams responses from the OpenAI Responses API (``POST {base_url}/responses``).

    ``model`` defaults to ``$OPENAI_MODEL``, ``api_key`` to ``$OPENAI_API_KEY``
    and ``base_url`` to ``$OPENAI_BASE_URL`` (else the OpenAI API, where a key is
    required). ``reasoning_effort`` (``"low"``, ``"medium"``, ``"high"``, ...) is
    sent as ``reasoning.effort`` together with ``reasoning.summary`` =
    ``reasoning_summary`` (default ``"auto"``), so reasoning models stream their
    summaries as reasoning deltas. ``extra_body`` is merged into every request
    (``max_output_tokens``, ``store``, ``include=["reasoning.encrypted_content"]``,
    ...). A request's ModelSettings are sent as ``temperature``, ``top_p``,
    ``max_output_tokens``, ``reasoning.effort`` (in place of ``reasoning_effort``)
    and, when tools are offered, ``tool_choice`` and ``parallel_tool_calls``;
    ``stop``, ``seed`` and ``reasoning_budget`` are refused (UnsupportedSetting). A request
    with an output type sends its schema as ``text.format`` (``json_schema``, not strict;
    wrapped as OpenAIChatModel does).
    Once a stream has started, ``idle_timeout`` seconds without an event
    raise ProviderTimeoutError (event types the adapter does not know do not
    count); None waits without bound.
    """

    env_prefix: ClassVar[str] = "OPENAI"
    default_base_url: ClassVar[str] = DEFAULT_OPENAI_BASE_URL
    unsupported_settings: ClassVar[Mapping[str, str]] = {
        "stop": "the Responses API has no stop sequences",
        "seed": "the Responses API has no seed",
        "reasoning_budget": "the Responses API takes reasoning_effort, not a token budget",
    }

    def __init__(
        self,
        model: str | None = None,
        *,
        reasoning_effort: str | None = None,
        reasoning_summary: str | None = "auto",
        **settings: Unpack[ProviderSettings],
    ) -> None:
        _text(optional=True, blank=False).check("OpenAIResponsesModel.reasoning_effort", reasoning_effort)
        _text(optional=True, blank=False).check("OpenAIResponsesModel.reasoning_summary", reasoning_summary)
        super().__init__(model, **settings)
        self.reasoning_effort = reasoning_effort
        self.reasoning_summary = reasoning_summary

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        body: dict[str, Any] = {"model": self.model, "input": responses_input(request.messages), "stream": True}
        if request.tools or request.server_tools:
            body["tools"] = responses_tools(request.tools, request.server_tools)
        settings = request.settings
        check_settings(self, settings)
        effort = settings.reasoning_effort or self.reasoning_effort
        if effort is not None:
            reasoning = {"effort": effort}
            if self.reasoning_summary is not None:
                reasoning["summary"] = self.reasoning_summary
            body["reasoning"] = reasoning
        for name, wire in (("temperature", "temperature"), ("top_p", "top_p"), ("max_tokens", "max_output_tokens")):
            if (value := getattr(settings, name)) is not None:
                body[wire] = value
        if request.tools or request.server_tools:
            if settings.tool_choice is not None:
                named = settings.named_tool
                body["tool_choice"] = {"type": "function", "name": named} if named else settings.tool_choice
            if settings.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = settings.parallel_tool_calls
        if request.output is not None:
            output = request.output
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": output.wire_name,
                    "schema": output.object_schema(),
                    "strict": False,
                }
            }
        body.update(self.extra_body)
        return body

    def headers(self) -> dict[str, str]:
        return openai_headers(self)

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        headers = self.headers()
        assembler = ResponsesAssembler()
        url = f"{self.base_url}/responses"
        idle = IdleTimer(self.idle_timeout, url)
        async with aclosing(post_sse(self.client, url, self.body(request), headers, self.timeout)) as events:
            while (event := await idle.next(events)) is not None:
                produced_events = assembler.feed(decode_object(event.data))
                if assembler.carried_content:  # not an event type the adapter does not know
                    idle.reset()
                for produced in produced_events:
                    yield produced
                if assembler.finished:
                    break
            else:
                raise MalformedStreamError("stream ended before response.completed or response.incomplete")
        yield unwrapped_answer(assembler.completed(), request.output)

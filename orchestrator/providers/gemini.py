"""A model on the Google Gemini API (``models/{model}:streamGenerateContent`` over SSE)."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Unpack
from urllib.parse import quote

from orchestrator.checks import text as _text
from orchestrator.checks import whole
from orchestrator.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolMessage,
    ToolStatus,
    UserMessage,
    describe_parts,
    images_of,
)
from orchestrator.model import DEFAULT_SETTINGS, ModelEvent, ModelRequest, ModelSettings, check_settings
from orchestrator.providers._http import IdleTimer, post_sse
from orchestrator.providers.base import HTTPStreamingModel, ProviderSettings
from orchestrator.providers.errors import AuthenticationError, MalformedStreamError
from orchestrator.providers.fields import decode_object
from orchestrator.providers.gemini_stream import GENERATED_CALL_ID, GeminiAssembler
from orchestrator.tools import ServerToolDefinition, ToolDefinition

__all__ = ["DEFAULT_GEMINI_BASE_URL", "GeminiModel", "gemini_contents", "gemini_tools"]

DEFAULT_GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"


def _image(part: ImagePart) -> dict[str, Any]:
    if part.url is not None:
        return {"fileData": {"mimeType": part.media_type, "fileUri": part.url}}
    assert part.data is not None
    return {"inlineData": {"mimeType": part.media_type, "data": base64.b64encode(part.data).decode("ascii")}}


def _user_parts(message: UserMessage) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"text": message.content}] if message.content else []
    return [
        {"text": part.text} if isinstance(part, TextPart) else _image(part)
        for part in message.content
        if not (isinstance(part, TextPart) and not part.text)
    ]


def _result_images(results: list[ToolMessage]) -> list[dict[str, Any]]:
    """The images of ``results`` as parts, each group introduced by the call it came from."""
    parts: list[dict[str, Any]] = []
    for result in results:
        parts.append({"text": f"Images returned by tool call {result.tool_call_id} ({result.name}):"})
        parts.extend(_image(image) for image in images_of(result.content))
    return parts


def _sent_id(call_id: str) -> dict[str, str]:
    """``{"id": ...}`` for an id Gemini made; nothing for one the adapter generated."""
    return {} if GENERATED_CALL_ID.fullmatch(call_id) else {"id": call_id}


def _signed(part: dict[str, Any], signature: str | None) -> dict[str, Any]:
    return {**part, "thoughtSignature": signature} if signature is not None else part


def _model_parts(message: AssistantMessage) -> list[dict[str, Any]]:
    """Thoughts, text, then calls, each with the thought signature Gemini gave it."""
    parts: list[dict[str, Any]] = []
    text_signature: str | None = None
    call_signatures: dict[str, str] = {}
    for block in message.reasoning:
        if block.text:
            parts.append(_signed({"text": block.text, "thought": True}, block.signature))
        elif block.signature is not None and block.id is not None:
            call_signatures[block.id] = block.signature
        elif block.signature is not None:
            text_signature = block.signature
    if message.content or text_signature is not None:
        parts.append(_signed({"text": message.content}, text_signature))
    for call in message.tool_calls:
        function_call = {"name": call.name, "args": dict(call.arguments), **_sent_id(call.id)}
        parts.append(_signed({"functionCall": function_call}, call_signatures.get(call.id)))
    return parts


def _function_response(message: ToolMessage) -> dict[str, Any]:
    key = "output" if message.status is ToolStatus.SUCCEEDED else "error"
    output = describe_parts(message.content)
    response = {"name": message.name, "response": {key: output}, **_sent_id(message.tool_call_id)}
    return {"functionResponse": response}


def _results_in_call_order(messages: tuple[Message, ...]) -> list[Message]:
    """``messages`` with each run of tool results ordered as the calls they answer (results are
    recorded as they finish; Gemini pairs parallel calls and responses by position)."""
    ordered: list[Message] = []
    positions: dict[str, int] = {}
    run: list[ToolMessage] = []
    for message in (*messages, None):
        if isinstance(message, ToolMessage):
            run.append(message)
            continue
        run.sort(key=lambda result: positions.get(result.tool_call_id, len(positions)))
        ordered.extend(run)
        run = []
        if isinstance(message, AssistantMessage):
            positions = {call.id: index for index, call in enumerate(message.tool_calls)}
        if message is not None:
            ordered.append(message)
    return ordered


def gemini_contents(messages: tuple[Message, ...]) -> tuple[str, list[dict[str, Any]]]:
    """The system instruction text and the ``contents`` list for our messages.

    System messages are joined into the instruction. Assistant turns have the
    role ``model``; tool results become ``functionResponse`` parts (``output``,
    or ``error`` for a result that did not succeed) of a ``user`` turn, in the order
    of the calls they answer. A result with images describes them where they were
    (``describe_parts``), and the images follow all the results of that turn as
    parts of the same turn, each group introduced by its call.
    Consecutive turns of one role are merged, so the results of one turn's
    calls travel together; empty turns are left out.
    """
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    with_images: list[ToolMessage] = []
    for message in (*_results_in_call_order(messages), None):
        if with_images and not isinstance(message, ToolMessage):
            _add(contents, "user", _result_images(with_images))
            with_images = []
        if message is None:
            break
        if isinstance(message, ToolMessage) and images_of(message.content):
            with_images.append(message)
        if isinstance(message, SystemMessage):
            if message.content:
                system.append(message.content)
            continue
        if isinstance(message, AssistantMessage):
            role, parts = "model", _model_parts(message)
        elif isinstance(message, ToolMessage):
            role, parts = "user", [_function_response(message)]
        else:
            role, parts = "user", _user_parts(message)
        _add(contents, role, parts)
    return "\n\n".join(system), contents


def _add(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    """``parts`` as a turn of ``role``, merged into the last turn when it has that role."""
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def gemini_tools(tools: tuple[ToolDefinition, ...], server_tools: tuple[ServerToolDefinition, ...] = ()) -> list[Any]:
    """Local tools as one ``functionDeclarations`` entry (schemas as ``parametersJsonSchema``),
    server tools as ``{type: options}`` (``ServerToolDefinition("googleSearch")`` -> ``{"googleSearch": {}}``)."""
    encoded: list[Any] = []
    if tools:
        declarations = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": dict(t.parameters)} for t in tools
        ]
        encoded.append({"functionDeclarations": declarations})
    encoded.extend({s.type: dict(s.options)} for s in server_tools)
    return encoded


_GEMINI_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


class GeminiModel(HTTPStreamingModel):
    """Streams responses from the Gemini API.

    ``model`` defaults to ``$GEMINI_MODEL``, ``api_key`` to ``$GEMINI_API_KEY``
    (else ``$GOOGLE_API_KEY``; sent as ``x-goog-api-key``) and ``base_url`` to
    ``$GEMINI_BASE_URL`` or ``$GOOGLE_GEMINI_BASE_URL`` (else the Gemini API, where a key is required); requests
    go to ``{base_url}/{api_version}/models/{model}:streamGenerateContent?alt=sse``.
    ``thinking_budget`` (tokens; 0 off, -1 automatic) is sent as
    ``generationConfig.thinkingConfig`` with ``includeThoughts``, so thoughts stream
    as reasoning deltas; ``max_output_tokens`` as ``generationConfig.maxOutputTokens``.
    ``extra_body`` is merged into every request (its ``generationConfig`` into
    the adapter's). A request's ModelSettings are sent in ``generationConfig`` as
    ``temperature``, ``topP``, ``maxOutputTokens``, ``stopSequences``, ``seed`` and
    ``thinkingConfig.thinkingBudget`` (``reasoning_budget``), and ``tool_choice`` as
    ``toolConfig.functionCallingConfig`` (``AUTO``, ``ANY``, ``NONE``; a tool's name is ``ANY``
    with ``allowedFunctionNames``); ``parallel_tool_calls`` and ``reasoning_effort`` are refused
    (UnsupportedSetting). A request with an output type and no tools sends its schema as
    ``generationConfig.responseJsonSchema`` with ``responseMimeType`` JSON; with tools it is not
    sent (not every Gemini model takes a JSON response type beside function calling) and the
    answer is only checked. Once a stream has started, ``idle_timeout`` seconds without a
    chunk that carries anything raise ProviderTimeoutError; None waits without bound.
    """

    env_prefix: ClassVar[str] = "GEMINI"
    default_base_url: ClassVar[str] = DEFAULT_GEMINI_BASE_URL
    unsupported_settings: ClassVar[Mapping[str, str]] = {
        "parallel_tool_calls": "the Gemini API has no switch for parallel function calls",
        "reasoning_effort": "the Gemini API takes a thinking budget: use reasoning_budget",
    }

    def __init__(
        self,
        model: str | None = None,
        *,
        api_version: str = "v1beta",
        thinking_budget: int | None = None,
        max_output_tokens: int | None = None,
        **settings: Unpack[ProviderSettings],
    ) -> None:
        _text(blank=False).check("GeminiModel.api_version", api_version)
        whole(-1, optional=True).check("GeminiModel.thinking_budget", thinking_budget)  # -1: the model decides
        whole(1, optional=True).check("GeminiModel.max_output_tokens", max_output_tokens)
        base_url = settings.get("base_url") or os.environ.get("GEMINI_BASE_URL")
        settings["base_url"] = base_url or os.environ.get("GOOGLE_GEMINI_BASE_URL")
        super().__init__(model, **settings)
        if self.api_key is None:
            self.api_key = os.environ.get("GOOGLE_API_KEY")
        self.model = self.model.removeprefix("models/")
        self.api_version = api_version.strip("/")
        self.thinking_budget = thinking_budget
        self.max_output_tokens = max_output_tokens

    @property
    def url(self) -> str:
        model = quote(self.model, safe="-._~")
        return f"{self.base_url}/{self.api_version}/models/{model}:streamGenerateContent?alt=sse"

    def generation_config(self, settings: ModelSettings = DEFAULT_SETTINGS) -> dict[str, Any]:
        config: dict[str, Any] = {}
        max_tokens = settings.max_tokens or self.max_output_tokens
        if max_tokens is not None:
            config["maxOutputTokens"] = max_tokens
        for name, wire in (("temperature", "temperature"), ("top_p", "topP"), ("seed", "seed")):
            if (value := getattr(settings, name)) is not None:
                config[wire] = value
        if settings.stop is not None:
            config["stopSequences"] = list(settings.stop)
        budget = settings.reasoning_budget if settings.reasoning_budget is not None else self.thinking_budget
        if budget is not None:
            config["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": True}
        extra = self.extra_body.get("generationConfig")
        if isinstance(extra, Mapping):
            config.update(extra)
        return config

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        system, contents = gemini_contents(request.messages)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        settings = request.settings
        check_settings(self, settings)
        if request.tools or request.server_tools:
            body["tools"] = gemini_tools(request.tools, request.server_tools)
            if settings.tool_choice is not None:
                named = settings.named_tool
                mode = "ANY" if named else _GEMINI_MODES[settings.tool_choice]
                calling: dict[str, Any] = {"mode": mode}
                if named:
                    calling["allowedFunctionNames"] = [named]
                body["toolConfig"] = {"functionCallingConfig": calling}
        body.update(self.extra_body)
        config = self.generation_config(settings)
        if request.output is not None and not (request.tools or request.server_tools):
            config.setdefault("responseMimeType", "application/json")
            config.setdefault("responseJsonSchema", dict(request.output.schema))
        if config:
            body["generationConfig"] = config
        return body

    def headers(self) -> dict[str, str]:
        if self.needs_key:
            raise AuthenticationError("no Gemini API key: pass api_key= or set GEMINI_API_KEY (or GOOGLE_API_KEY)")
        headers = {"Accept": "text/event-stream"}
        if self.api_key:
            headers["x-goog-api-key"] = self.api_key
        return headers

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        headers = self.headers()
        assembler = GeminiAssembler()
        url = self.url
        idle = IdleTimer(self.idle_timeout, url)
        async with aclosing(post_sse(self.client, url, self.body(request), headers, self.timeout)) as events:
            while (event := await idle.next(events)) is not None:
                produced_events = assembler.feed(decode_object(event.data))
                if assembler.carried_content:  # an empty chunk is a keepalive
                    idle.reset()
                for produced in produced_events:
                    yield produced
        # Gemini sends no terminator: the body ends after the chunk with the finish reason.
        if not assembler.finished:
            raise MalformedStreamError("stream ended before a finishReason")
        for produced in assembler.finish():
            yield produced
        yield assembler.completed()

"""Tool images in request bodies: Anthropic gets the images, Chat Completions a description and a user turn."""

from __future__ import annotations

import base64
import json
from typing import Any

import trio
from provider_mock import Server, collect, sse

from orchestrator import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.model import ModelRequest
from orchestrator.providers import AnthropicModel, OpenAIChatModel


def anthropic_model(server: Server) -> AnthropicModel:
    # These tests pin how tool results are encoded; prompt caching (on by default) is tested on its own.
    return AnthropicModel("claude-sonnet-4-20250514", api_key="sk-ant-test", client=server.client(), prompt_caching=False)


def openai_model(server: Server) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", api_key="sk-test", client=server.client())


def _event(payload: dict[str, Any]) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n"


def anthropic_stream(block: dict[str, Any], delta: dict[str, Any] | None, stop: str) -> str:
    """A one-block Messages stream."""
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "m",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    body = _event({"type": "message_start", "message": message})
    body += _event({"type": "content_block_start", "index": 0, "content_block": block})
    if delta is not None:
        body += _event({"type": "content_block_delta", "index": 0, "delta": delta})
    body += _event({"type": "content_block_stop", "index": 0})
    body += _event(
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 3}}
    )
    return body + _event({"type": "message_stop"})


def anthropic_text(text: str) -> str:
    return anthropic_stream({"type": "text", "text": ""}, {"type": "text_delta", "text": text}, "end_turn")


def anthropic_call(call_id: str, name: str, arguments: str) -> str:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return anthropic_stream(block, {"type": "input_json_delta", "partial_json": arguments}, "tool_use")


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    payload = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(payload)}\n\n"


def openai_text(text: str) -> str:
    return _chunk({"role": "assistant", "content": text}) + _chunk({}, "stop") + "data: [DONE]\n\n"


def openai_call(call_id: str, name: str, arguments: str) -> str:
    call = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return _chunk({"role": "assistant", "tool_calls": [call]}) + _chunk({}, "tool_calls") + "data: [DONE]\n\n"


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
PNG_B64 = base64.b64encode(PNG).decode("ascii")


@tool
def screenshot(page: str) -> list[object]:
    """Take a screenshot of a page.

    Args:
        page: which page
    """
    return [f"{page} rendered:", ImagePart(data=PNG, media_type="image/png")]


async def test_anthropic_receives_tool_images_as_image_blocks_inside_the_tool_result() -> None:
    server = Server(
        sse(anthropic_call("toolu_1", "screenshot", '{"page": "home"}')),
        sse(anthropic_text("A blank page.")),
    )
    agent = await create_agent(anthropic_model(server), tools=[screenshot])
    with trio.fail_after(10):
        answer = await agent.run("What does the home page show?")
    assert answer.content == "A blank page."
    turn = server.bodies()[1]["messages"][2]
    assert turn == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [
                    {"type": "text", "text": "home rendered:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
                ],
            }
        ],
    }


async def test_anthropic_sends_url_images_and_marks_failed_results_with_images() -> None:
    server = Server(sse(anthropic_text("ok")))
    history: list[Message] = [
        UserMessage("go"),
        AssistantMessage("", (ToolCall("toolu_2", "fetch"),)),
        ToolMessage("toolu_2", "fetch", (ImagePart(url="https://example.test/a.png"),), ToolStatus.FAILED),
    ]
    await collect(anthropic_model(server), ModelRequest(history))
    assert server.bodies()[0]["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": [{"type": "image", "source": {"type": "url", "url": "https://example.test/a.png"}}],
            "is_error": True,
        }
    ]


async def test_chat_completions_gets_a_described_tool_message_then_the_images_in_a_user_turn() -> None:
    server = Server(
        sse(openai_call("call_1", "screenshot", '{"page": "home"}')),
        sse(openai_text("A blank page.")),
    )
    agent = await create_agent(openai_model(server), tools=[screenshot])
    with trio.fail_after(10):
        await agent.run("What does the home page show?")
    messages = server.bodies()[1]["messages"]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": f"home rendered:[image: image/png, {len(PNG)} bytes]"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by tool call call_1 (screenshot):"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            ],
        },
    ]


async def test_chat_completions_puts_the_images_after_every_result_of_the_turn() -> None:
    server = Server(sse(openai_text("ok")))
    history: list[Message] = [
        UserMessage("go"),
        AssistantMessage("", (ToolCall("a", "shot"), ToolCall("b", "plain"), ToolCall("c", "shot"))),
        ToolMessage("a", "shot", (ImagePart(url="https://example.test/a.png"),)),
        ToolMessage("b", "plain", "no image"),
        ToolMessage("c", "shot", (TextPart("c:"), ImagePart(data=PNG, media_type="image/png"))),
        UserMessage("also this"),
    ]
    await collect(openai_model(server), ModelRequest(history))
    messages = server.bodies()[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool", "user", "user"]
    assert [m["content"] for m in messages[2:5]] == [
        "[image: image/png, https://example.test/a.png]",
        "no image",
        f"c:[image: image/png, {len(PNG)} bytes]",
    ]
    assert messages[5]["content"] == [
        {"type": "text", "text": "Images returned by tool call a (shot):"},
        {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}},
        {"type": "text", "text": "Images returned by tool call c (shot):"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
    ]
    assert messages[6] == {"role": "user", "content": "also this"}


async def test_chat_completions_without_tool_images_sends_only_the_descriptions() -> None:
    server = Server(sse(openai_text("ok")))
    history: list[Message] = [
        UserMessage("go"),
        AssistantMessage("", (ToolCall("a", "shot"),)),
        ToolMessage("a", "shot", (TextPart("a:"), ImagePart(data=PNG, media_type="image/png"))),
    ]
    text_only = OpenAIChatModel(
        "local", api_key="", base_url="http://127.0.0.1:1/v1", client=server.client(), tool_images=False
    )
    await collect(text_only, ModelRequest(history))
    messages = server.bodies()[0]["messages"]
    assert messages[2:] == [{"role": "tool", "tool_call_id": "a", "content": f"a:[image: image/png, {len(PNG)} bytes]"}]

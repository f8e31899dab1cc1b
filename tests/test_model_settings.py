"""ModelSettings: set on the agent, per run and by before_model hooks, and sent as each provider's wire fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from provider_mock import Server, sse

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ModelRequest,
    ModelSettings,
    ScriptedModel,
    ToolCall,
    UnsupportedSetting,
    create_agent,
    tool,
)
from orchestrator.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel

FIXTURES = Path(__file__).parent / "fixtures" / "providers"


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return city


def _openai(server: Server) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", api_key="sk-test", client=server.client())


def _responses(server: Server) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("gpt-5-mini", api_key="sk-test", client=server.client())


def _anthropic(server: Server) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-20250514", api_key="k", client=server.client(), prompt_caching=False)


def _gemini(server: Server) -> GeminiModel:
    return GeminiModel("gemini-2.5-flash", api_key="k", client=server.client())


SAMPLING = ModelSettings(temperature=0.2, top_p=0.9, max_tokens=300)


async def _sent(make: Any, fixture: str, settings: ModelSettings, *, tools: bool = True) -> dict[str, Any]:
    server = Server(sse((FIXTURES / fixture).read_text()))
    client = await create_agent(make(server), tools=[lookup] if tools else [], model_settings=settings)
    await client.run("hello")
    body: dict[str, Any] = server.bodies()[0]
    return body


async def test_openai_chat_sends_each_setting_as_its_field() -> None:
    settings = attrs.evolve(
        SAMPLING, stop=["END"], seed=7, tool_choice="required", parallel_tool_calls=False, reasoning_effort="low"
    )
    body = await _sent(_openai, "openai_text.sse", settings)
    sent = {key: body[key] for key in body if key not in ("model", "messages", "stream", "stream_options", "tools")}
    assert sent == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_completion_tokens": 300,
        "stop": ["END"],
        "seed": 7,
        "reasoning_effort": "low",
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }
    named = await _sent(_openai, "openai_text.sse", ModelSettings(tool_choice="lookup"))
    assert named["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    untooled = await _sent(_openai, "openai_text.sse", ModelSettings(tool_choice="none"), tools=False)
    assert "tool_choice" not in untooled


async def test_openai_responses_sends_each_setting_as_its_field() -> None:
    settings = attrs.evolve(SAMPLING, tool_choice="lookup", parallel_tool_calls=True, reasoning_effort="high")
    body = await _sent(_responses, "openai_responses_text.sse", settings)
    assert {key: body[key] for key in ("temperature", "top_p", "max_output_tokens", "parallel_tool_calls")} == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_output_tokens": 300,
        "parallel_tool_calls": True,
    }
    assert body["tool_choice"] == {"type": "function", "name": "lookup"}
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    none = await _sent(_responses, "openai_responses_text.sse", ModelSettings(tool_choice="none"))
    assert none["tool_choice"] == "none"


async def test_anthropic_sends_each_setting_as_its_field() -> None:
    settings = attrs.evolve(
        SAMPLING, max_tokens=4000, stop=("END",), tool_choice="required", parallel_tool_calls=False
    )
    settings = attrs.evolve(settings, reasoning_budget=2048)
    body = await _sent(_anthropic, "anthropic_text.sse", settings)
    assert {key: body[key] for key in ("temperature", "top_p", "max_tokens", "stop_sequences", "tool_choice")} == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 4000,
        "stop_sequences": ["END"],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    }
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    named = await _sent(_anthropic, "anthropic_text.sse", ModelSettings(tool_choice="lookup"))
    assert named["tool_choice"] == {"type": "tool", "name": "lookup"}
    assert named["max_tokens"] == 4096  # the constructor's, when no setting takes its place


async def test_gemini_sends_each_setting_as_its_field() -> None:
    settings = attrs.evolve(SAMPLING, stop="END", seed=3, tool_choice="lookup", reasoning_budget=0)
    body = await _sent(_gemini, "gemini_text.sse", settings)
    assert body["generationConfig"] == {
        "temperature": 0.2,
        "topP": 0.9,
        "maxOutputTokens": 300,
        "seed": 3,
        "stopSequences": ["END"],
        "thinkingConfig": {"thinkingBudget": 0, "includeThoughts": True},
    }
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["lookup"]}}
    required = await _sent(_gemini, "gemini_text.sse", ModelSettings(tool_choice="required"))
    assert required["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


@pytest.mark.parametrize(
    ("make", "setting"),
    [
        (_openai, {"reasoning_budget": 1024}),
        (_responses, {"stop": ["x"]}),
        (_responses, {"seed": 1}),
        (_anthropic, {"seed": 1}),
        (_anthropic, {"reasoning_effort": "low"}),
        (_gemini, {"parallel_tool_calls": False}),
        (_gemini, {"reasoning_effort": "low"}),
    ],
)
async def test_a_setting_the_provider_has_no_field_for_is_refused_when_the_agent_is_made(
    make: Any, setting: dict[str, Any]
) -> None:
    server = Server()
    with pytest.raises(UnsupportedSetting) as refused:
        await create_agent(make(server), model_settings=ModelSettings(**setting))
    name = next(iter(setting))
    assert refused.value.setting == name
    assert f"does not support the model setting {name!r}" in str(refused.value)
    client = await create_agent(make(server))
    with pytest.raises(UnsupportedSetting):
        await client.run("hi", config=AgentRunConfig(model_settings=ModelSettings(**setting)))
    assert server.requests == []


class Precise(AgentExtension):
    """Asks for a cold answer on every turn after the first."""

    async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
        if len(context.messages) > 2:
            context.model_settings = attrs.evolve(context.model_settings, temperature=0.0)


async def test_settings_reach_the_model_from_agent_run_and_before_model_in_that_order() -> None:
    model = ScriptedModel([_call(), AssistantMessage("done"), AssistantMessage("again")])
    client = await create_agent(
        model, tools=[lookup], extensions=[Precise()], model_settings=ModelSettings(temperature=0.7, max_tokens=100)
    )
    await client.run("a", config=AgentRunConfig(session_id="s", model_settings=ModelSettings(max_tokens=50)))
    await client.run("b", config=AgentRunConfig(session_id="t"))
    seen = [(r.settings.temperature, r.settings.max_tokens) for r in model.requests]
    assert seen == [(0.7, 50), (0.0, 50), (0.7, 100)]


def _call() -> AssistantMessage:
    return AssistantMessage("", (ToolCall("c1", "lookup", {"city": "Rome"}),))


def test_settings_are_checked_when_made() -> None:
    with pytest.raises(ValueError, match=r"ModelSettings\.temperature"):
        ModelSettings(temperature=3)
    with pytest.raises(TypeError, match=r"ModelSettings\.parallel_tool_calls must be a bool"):
        ModelSettings(parallel_tool_calls="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ModelSettings\.stop\[1\]"):
        ModelSettings(stop=["ok", 3])  # type: ignore[list-item]
    assert ModelSettings(stop="END").stop == ("END",)
    assert ModelSettings(temperature=1).merged(ModelSettings(seed=2)).given() == {"temperature": 1, "seed": 2}

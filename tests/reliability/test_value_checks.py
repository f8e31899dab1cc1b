"""Every public value a user constructs refuses a wrong-typed field (TypeError) or a bad value (ValueError)
when it is made, with a message naming the field, instead of failing later, far from the mistake.

Covered: the values exported from ``orchestrator`` and ``orchestrator.providers`` that users build
(configs, messages and their parts, tool definitions and results, usage, refusals, retry policies),
and the constructors users call (``Agent``, ``SubAgentExtension``, ``ResponseRouter``, the provider
models, the extensions of ``orchestrator.extensions``' modules but MCP and bash). Events and deltas
are built by the runtime itself and are not checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator import (
    Agent,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ImagePart,
    ReasoningBlock,
    Refusal,
    ResponseRouter,
    ScriptedModel,
    ServerToolDefinition,
    SubAgentExtension,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    ToolResult,
    Usage,
    UserMessage,
)
from orchestrator.extensions.agents_md import AgentsMdExtension
from orchestrator.extensions.compaction import CompactionExtension
from orchestrator.extensions.files.filesystem import FilesystemExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.skills import SkillsExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel, RetryPolicy

Build = Callable[[], object]


def tool_definition(**changed: Any) -> ToolDefinition:
    fields: dict[str, Any] = {"name": "t", "description": "d", "parameters": {}, **changed}
    return ToolDefinition(**fields)


def agent(**changed: Any) -> Agent:
    model: Any = changed.pop("model", ScriptedModel())
    return Agent(model, **changed)


def subagent(**changed: Any) -> SubAgentExtension:
    fields: dict[str, Any] = {"agent": Agent(ScriptedModel()), "name": "research", "description": "d", **changed}
    return SubAgentExtension(fields.pop("agent"), **fields)


def openai(**changed: Any) -> OpenAIChatModel:
    return OpenAIChatModel(changed.pop("model", "m"), api_key=changed.pop("api_key", "k"), **changed)


WRONG_TYPES: list[tuple[str, Build]] = [
    ("AgentRunConfig.session_id", lambda: AgentRunConfig(3)),  # type: ignore[arg-type]
    ("AgentRunConfig.request_id", lambda: AgentRunConfig("s", 3)),  # type: ignore[arg-type]
    ("ExternalEvent.name", lambda: ExternalEvent(3)),  # type: ignore[arg-type]
    ("ExternalEvent.payload", lambda: ExternalEvent("answer", ["a"])),  # type: ignore[arg-type]
    ("TextPart.text", lambda: TextPart(b"x")),  # type: ignore[arg-type]
    ("ImagePart.url", lambda: ImagePart(url=5)),  # type: ignore[arg-type]
    ("ImagePart.data", lambda: ImagePart(data="aGVsbG8=")),  # type: ignore[arg-type]
    ("ImagePart.media_type", lambda: ImagePart(url="https://x/y.png", media_type=None)),  # type: ignore[arg-type]
    ("SystemMessage.content", lambda: SystemMessage(3)),  # type: ignore[arg-type]
    ("UserMessage.content", lambda: UserMessage(3)),  # type: ignore[arg-type]
    ("UserMessage.content", lambda: UserMessage(["text", 3])),  # type: ignore[list-item]
    ("AssistantMessage.content", lambda: AssistantMessage(None)),  # type: ignore[arg-type]
    ("AssistantMessage.tool_calls", lambda: AssistantMessage("x", "calls")),  # type: ignore[arg-type]
    ("AssistantMessage.tool_calls[0]", lambda: AssistantMessage("x", [{"id": "1"}])),  # type: ignore[list-item]
    ("AssistantMessage.reasoning[0]", lambda: AssistantMessage("x", reasoning=["thought"])),  # type: ignore[list-item]
    ("ToolCall.id", lambda: ToolCall(7, "ask")),  # type: ignore[arg-type]
    ("ToolCall.name", lambda: ToolCall("1", 42)),  # type: ignore[arg-type]
    ("ToolCall.arguments", lambda: ToolCall("1", "ask", [("a", 1)])),  # type: ignore[arg-type]
    ("ToolCall.invalid_arguments", lambda: ToolCall("1", "ask", {}, b"{")),  # type: ignore[arg-type]
    ("ReasoningBlock.text", lambda: ReasoningBlock(5)),  # type: ignore[arg-type]
    ("ReasoningBlock.signature", lambda: ReasoningBlock("t", signature=b"s")),  # type: ignore[arg-type]
    ("ReasoningBlock.data", lambda: ReasoningBlock("t", data=1)),  # type: ignore[arg-type]
    ("ReasoningBlock.id", lambda: ReasoningBlock("t", id=1)),  # type: ignore[arg-type]
    ("ToolMessage.tool_call_id", lambda: ToolMessage(1, "n", "c")),  # type: ignore[arg-type]
    ("ToolMessage.name", lambda: ToolMessage("1", None, "c")),  # type: ignore[arg-type]
    ("ToolMessage.content", lambda: ToolMessage("1", "n", 3)),  # type: ignore[arg-type]
    ("ToolMessage.status", lambda: ToolMessage("1", "n", "c", 1)),  # type: ignore[arg-type]
    ("ToolDefinition.name", lambda: tool_definition(name=3)),
    ("ToolDefinition.description", lambda: tool_definition(description=None)),
    ("ToolDefinition.parameters", lambda: tool_definition(parameters='{"type": "object"}')),
    ("ToolDefinition.handler", lambda: tool_definition(handler="run")),
    ("ToolDefinition.serial", lambda: tool_definition(serial="yes")),
    ("ToolDefinition.inject", lambda: tool_definition(inject=["context"])),
    ("ToolDefinition.thread", lambda: tool_definition(thread=1)),
    ("ToolDefinition.idempotent", lambda: tool_definition(idempotent=None)),
    ("ToolResult.status", lambda: ToolResult("x", 1)),  # type: ignore[arg-type]
    ("ServerToolDefinition.type", lambda: ServerToolDefinition(3)),  # type: ignore[arg-type]
    ("ServerToolDefinition.options", lambda: ServerToolDefinition("web_search", ["x"])),  # type: ignore[arg-type]
    ("Usage.input_tokens", lambda: Usage("1")),  # type: ignore[arg-type]
    ("Usage.output_tokens", lambda: Usage(1, 2.5)),  # type: ignore[arg-type]
    ("Usage.cache_read_tokens", lambda: Usage(1, 2, "3")),  # type: ignore[arg-type]
    ("Usage.cache_write_tokens", lambda: Usage(1, 2, None, True)),
    ("Refusal.reason", lambda: Refusal(None)),  # type: ignore[arg-type]
    ("RetryPolicy.max_retries", lambda: RetryPolicy(max_retries="2")),  # type: ignore[arg-type]
    ("RetryPolicy.max_retries", lambda: RetryPolicy(max_retries=True)),
    ("RetryPolicy.initial_delay", lambda: RetryPolicy(initial_delay="0.5")),  # type: ignore[arg-type]
    ("RetryPolicy.multiplier", lambda: RetryPolicy(multiplier=None)),  # type: ignore[arg-type]
    ("RetryPolicy.max_delay", lambda: RetryPolicy(max_delay="30")),  # type: ignore[arg-type]
    ("RetryPolicy.jitter", lambda: RetryPolicy(jitter="0.1")),  # type: ignore[arg-type]
    ("RetryPolicy.total_timeout", lambda: RetryPolicy(total_timeout="600")),  # type: ignore[arg-type]
    ("Agent.model", lambda: agent(model="gpt-4o")),
    ("Agent.extensions[0]", lambda: agent(extensions=["ask_user"])),
    ("Agent.tools[0]", lambda: agent(tools=[lambda: None])),
    ("Agent.system_prompt", lambda: agent(system_prompt=["be brief"])),
    ("Agent.max_iterations", lambda: agent(max_iterations="25")),
    ("Agent.history", lambda: agent(history={})),
    ("Agent.steering", lambda: agent(steering="no")),
    ("SubAgentExtension.agent", lambda: subagent(agent="researcher")),
    ("SubAgentExtension.name", lambda: subagent(name=3)),
    ("SubAgentExtension.description", lambda: subagent(description=None)),
    ("SubAgentExtension.max_depth", lambda: subagent(max_depth="3")),
    ("ResponseRouter.key_field", lambda: ResponseRouter(3)),  # type: ignore[arg-type]
    ("OpenAIChatModel.model", lambda: openai(model=4)),
    ("OpenAIChatModel.api_key", lambda: openai(api_key=123)),
    ("OpenAIChatModel.base_url", lambda: openai(base_url=8080)),
    ("OpenAIChatModel.max_retries", lambda: openai(max_retries="2")),
    ("OpenAIChatModel.timeout", lambda: openai(timeout="60")),
    ("OpenAIChatModel.idle_timeout", lambda: openai(idle_timeout="300")),
    ("OpenAIChatModel.retry", lambda: openai(retry=3)),
    ("OpenAIChatModel.extra_body", lambda: openai(extra_body=[("a", 1)])),
    ("OpenAIChatModel.sleep", lambda: openai(sleep=1.0)),
    ("OpenAIChatModel.client", lambda: openai(client="http://localhost")),
    ("OpenAIChatModel.reasoning_effort", lambda: openai(reasoning_effort=1)),
    ("OpenAIChatModel.tool_images", lambda: openai(tool_images="no")),
    ("AnthropicModel.max_tokens", lambda: AnthropicModel("m", api_key="k", max_tokens="4096")),  # type: ignore[arg-type]
    ("AnthropicModel.thinking_budget", lambda: AnthropicModel("m", api_key="k", thinking_budget=2048.0)),  # type: ignore[arg-type]
    ("AnthropicModel.prompt_caching", lambda: AnthropicModel("m", api_key="k", prompt_caching=None)),  # type: ignore[arg-type]
    ("AnthropicModel.timeout", lambda: AnthropicModel("m", api_key="k", timeout=None)),  # type: ignore[typeddict-item]
    ("GeminiModel.api_version", lambda: GeminiModel("m", api_key="k", api_version=1)),  # type: ignore[arg-type]
    ("GeminiModel.thinking_budget", lambda: GeminiModel("m", api_key="k", thinking_budget="auto")),  # type: ignore[arg-type]
    ("GeminiModel.max_output_tokens", lambda: GeminiModel("m", api_key="k", max_output_tokens="8k")),  # type: ignore[arg-type]
    ("OpenAIResponsesModel.reasoning_effort", lambda: OpenAIResponsesModel("m", api_key="k", reasoning_effort=1)),  # type: ignore[arg-type]
    ("OpenAIResponsesModel.reasoning_summary", lambda: OpenAIResponsesModel("m", api_key="k", reasoning_summary=1)),  # type: ignore[arg-type]
    ("AgentsMdExtension.root", lambda: AgentsMdExtension(3)),  # type: ignore[arg-type]
    ("AgentsMdExtension.file_name", lambda: AgentsMdExtension(".", file_name=None)),  # type: ignore[arg-type]
    ("AgentsMdExtension.max_parents", lambda: AgentsMdExtension(".", max_parents="8")),  # type: ignore[arg-type]
    ("AgentsMdExtension.max_bytes", lambda: AgentsMdExtension(".", max_bytes=64e3)),  # type: ignore[arg-type]
    ("CompactionExtension.model", lambda: CompactionExtension("gpt-4o")),  # type: ignore[arg-type]
    ("CompactionExtension.threshold_tokens", lambda: CompactionExtension(threshold_tokens="4k")),  # type: ignore[arg-type]
    ("CompactionExtension.keep_last", lambda: CompactionExtension(keep_last=None)),  # type: ignore[arg-type]
    ("CompactionExtension.prompt", lambda: CompactionExtension(prompt=3)),  # type: ignore[arg-type]
    ("CompactionExtension.auto", lambda: CompactionExtension(auto="yes")),  # type: ignore[arg-type]
    ("FilesystemExtension.root", lambda: FilesystemExtension(None)),  # type: ignore[arg-type]
    ("FilesystemExtension.max_chars", lambda: FilesystemExtension(".", max_chars="1")),  # type: ignore[arg-type]
    ("FilesystemExtension.max_results", lambda: FilesystemExtension(".", max_results=2.0)),  # type: ignore[arg-type]
    ("FilesystemExtension.max_edit_bytes", lambda: FilesystemExtension(".", max_edit_bytes=None)),  # type: ignore[arg-type]
    ("SkillsExtension.paths", lambda: SkillsExtension(3)),  # type: ignore[arg-type]
    ("SkillsExtension.paths[1]", lambda: SkillsExtension([".", 3])),  # type: ignore[list-item]
    ("SkillsExtension.max_bytes", lambda: SkillsExtension(".", max_bytes="256k")),  # type: ignore[arg-type]
    ("PlanModeExtension.system_prompt", lambda: PlanModeExtension(system_prompt=3)),  # type: ignore[arg-type]
    ("PlanModeExtension.root", lambda: PlanModeExtension(root=3)),  # type: ignore[arg-type]
    ("PlanModeExtension.writable", lambda: PlanModeExtension(writable=5)),  # type: ignore[arg-type]
    ("ToolApprovalExtension.policy", lambda: ToolApprovalExtension(["bash"])),  # type: ignore[arg-type]
    ("ToolApprovalExtension.default", lambda: ToolApprovalExtension(default=3)),  # type: ignore[arg-type]
    ("SQLiteSessionStore.path", lambda: SQLiteSessionStore(3)),  # type: ignore[arg-type]
    ("SQLiteSessionStore.synchronous", lambda: SQLiteSessionStore(":memory:", synchronous=1)),  # type: ignore[arg-type]
]

BAD_VALUES: list[tuple[str, Build]] = [
    ("ExternalEvent.name", lambda: ExternalEvent("  ")),
    ("ImagePart.media_type", lambda: ImagePart(url="https://x/y.png", media_type="")),
    ("ToolMessage.status", lambda: ToolMessage("1", "n", "c", "done")),  # type: ignore[arg-type]
    ("ToolDefinition.name", lambda: tool_definition(name="")),
    ("ToolDefinition.inject[0]", lambda: tool_definition(inject=(("ctx", "request"),))),
    ("ToolResult.status", lambda: ToolResult("x", "done")),
    ("ServerToolDefinition.type", lambda: ServerToolDefinition("")),
    ("Usage.input_tokens", lambda: Usage(-1, 0)),
    ("Usage.cache_write_tokens", lambda: Usage(1, 1, 0, -5)),
    ("RetryPolicy.max_retries", lambda: RetryPolicy(max_retries=-1)),
    ("RetryPolicy.initial_delay", lambda: RetryPolicy(initial_delay=-0.5)),
    ("RetryPolicy.initial_delay", lambda: RetryPolicy(initial_delay=math.nan)),
    ("RetryPolicy.multiplier", lambda: RetryPolicy(multiplier=0)),
    ("RetryPolicy.max_delay", lambda: RetryPolicy(max_delay=math.inf)),
    ("RetryPolicy.jitter", lambda: RetryPolicy(jitter=-0.25)),
    ("RetryPolicy.total_timeout", lambda: RetryPolicy(total_timeout=0)),
    ("Agent.max_iterations", lambda: agent(max_iterations=0)),
    ("SubAgentExtension.name", lambda: subagent(name="")),
    ("SubAgentExtension.max_depth", lambda: subagent(max_depth=0)),
    ("ResponseRouter.key_field", lambda: ResponseRouter(" ")),
    ("OpenAIChatModel.max_retries", lambda: openai(max_retries=-1)),
    ("OpenAIChatModel.timeout", lambda: openai(timeout=0)),
    ("OpenAIChatModel.idle_timeout", lambda: openai(idle_timeout=-1)),
    ("OpenAIChatModel.reasoning_effort", lambda: openai(reasoning_effort="")),
    ("AnthropicModel.max_tokens", lambda: AnthropicModel("m", api_key="k", max_tokens=0)),
    ("GeminiModel.api_version", lambda: GeminiModel("m", api_key="k", api_version="")),
    ("GeminiModel.max_output_tokens", lambda: GeminiModel("m", api_key="k", max_output_tokens=0)),
    ("AgentsMdExtension.file_name", lambda: AgentsMdExtension(".", file_name="../AGENTS.md")),
    ("AgentsMdExtension.max_parents", lambda: AgentsMdExtension(".", max_parents=-1)),
    ("AgentsMdExtension.max_bytes", lambda: AgentsMdExtension(".", max_bytes=0)),
    ("CompactionExtension.threshold_tokens", lambda: CompactionExtension(threshold_tokens=-1)),
    ("CompactionExtension.keep_last", lambda: CompactionExtension(keep_last=-1)),
    ("CompactionExtension.prompt", lambda: CompactionExtension(prompt=" ")),
    ("FilesystemExtension.max_chars", lambda: FilesystemExtension(".", max_chars=0)),
    ("SkillsExtension.max_bytes", lambda: SkillsExtension(".", max_bytes=0)),
    ("PlanModeExtension.system_prompt", lambda: PlanModeExtension(system_prompt=" ")),
    ("ToolApprovalExtension.default", lambda: ToolApprovalExtension(default="sometimes")),
]


def ids(cases: list[tuple[str, Build]]) -> list[str]:
    return [f"{field}-{index}" for index, (field, _) in enumerate(cases)]


@pytest.mark.parametrize(("field", "build"), WRONG_TYPES, ids=ids(WRONG_TYPES))
def test_a_wrong_type_is_a_type_error_naming_the_field(field: str, build: Build) -> None:
    with pytest.raises(TypeError) as raised:
        build()
    assert field in str(raised.value), str(raised.value)


@pytest.mark.parametrize(("field", "build"), BAD_VALUES, ids=ids(BAD_VALUES))
def test_a_bad_value_is_a_value_error_naming_the_field(field: str, build: Build) -> None:
    with pytest.raises(ValueError) as raised:
        build()
    assert field in str(raised.value), str(raised.value)


def test_good_values_are_still_taken() -> None:
    assert ToolCall("1", "ask").arguments == {}
    assert AssistantMessage("x", [ToolCall("1", "ask")]).tool_calls == (ToolCall("1", "ask"),)
    assert ImagePart(data=bytearray(b"\x89PNG")).data == bytearray(b"\x89PNG")
    assert RetryPolicy(max_retries=0, initial_delay=0, jitter=0, total_timeout=None).max_retries == 0
    assert Usage(1, 2, None, 0) == Usage(1, 2, None, 0)
    assert GeminiModel("m", api_key="k", thinking_budget=-1).thinking_budget == -1
    assert agent(max_iterations=1, system_prompt=None, history=None).max_iterations == 1

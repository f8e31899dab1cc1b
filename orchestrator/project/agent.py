"""THE default agent: the one ``run``, ``chat``, ``serve`` and ``worker`` build when no ``--app`` is given.

Its tools are the workspace's files (and ``bash`` in the terminal), Plan Mode,
ask_user, the project's AGENTS.md files and skills, the trusted MCP servers and
the subagents of the settings; tool calls follow the configuration's permissions.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Literal

import attrs

from orchestrator.agent import AgentClient, create_agent
from orchestrator.extensions.agents_md import AgentsMdExtension
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.compaction import CompactionExtension
from orchestrator.extensions.files.bash import BashExtension
from orchestrator.extensions.files.filesystem import FilesystemExtension, filesystem_tools
from orchestrator.extensions.files.sandbox import DEFAULT_SANDBOX, Sandbox
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.skills import SkillsExtension
from orchestrator.extensions.steering import SteeringExtension
from orchestrator.extensions.subagent import SubAgentExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension, ToolPolicy
from orchestrator.model import Model
from orchestrator.project.config import ProjectConfig
from orchestrator.project.settings import setting_error
from orchestrator.tools import ToolDefinition

if TYPE_CHECKING:
    from orchestrator.extensions.mcp import MCPExtension

TERMINAL_PROMPT = "You are a helpful assistant working in a terminal. Be concise."
SERVICE_PROMPT = "You are a helpful assistant. Be concise."

Surface = Literal["terminal", "service"]


def service_model(spec: str | None) -> Model:
    """The model ``serve`` and ``worker`` run: ``spec``, or the scripted Plan Mode scenario (said on stderr).

    An explicit provider that cannot be used exits with 2 (SystemExit), as in the CLI.
    """
    from orchestrator.providers.choice import choose

    model, _ = choose(spec or "scripted", True, _warn)
    return model


def _warn(text: str) -> None:
    sys.stderr.write(text)


def subagent_models(config: ProjectConfig) -> dict[str, Model]:
    """The model of each subagent of ``config`` that names its own (``scripted`` is the CLI's scripted model);
    ConfigError naming the settings file, the key and the reason when one cannot be used (a missing key or
    package), so a front end can refuse before it starts anything."""
    from pathlib import Path

    from orchestrator.providers.choice import ModelUnavailable, build_model

    models: dict[str, Model] = {}
    for subagent, source in config.subagents:
        if subagent.model is None:
            continue
        try:
            models[subagent.name] = build_model(None if subagent.model == "scripted" else subagent.model, False)
        except ModelUnavailable as problem:
            reason = str(problem).replace("--model ", "", 1)
            raise setting_error(Path(source), f"subagents.{subagent.name}.model", reason) from None
    return models


@attrs.frozen
class DefaultAgent:
    """The built agent and the parts its front end talks to."""

    client: AgentClient
    approvals: ToolApprovalExtension | None
    mcp: MCPExtension | None
    config: ProjectConfig

    @property
    def fingerprint(self) -> str:
        """The digest of the configuration this agent was built with (``ProjectConfig.fingerprint``), for its runs."""
        return self.config.fingerprint()


@contextlib.asynccontextmanager
async def open_default_agent(
    config: ProjectConfig,
    model: Model,
    *,
    root: str,
    surface: Surface,
    store: AgentExtension | None = None,
    sandbox: Sandbox = DEFAULT_SANDBOX,
    plan_mode: bool = True,
    tools: Sequence[ToolDefinition] = (),
    extra: Sequence[AgentExtension] = (),
) -> AsyncIterator[DefaultAgent]:
    """The default agent for ``config`` while the block runs (its MCP servers are stopped when it exits).

    ``surface`` "terminal" adds steering, ``bash`` and compaction and always asks
    before the tools the permissions say; "service" asks only when a settings
    file gives permissions. A subagent runs on its own ``model`` when the settings name one (else on
    ``model``) and is offered only its ``tools`` when they are listed (else every file tool); ConfigError
    when a subagent's model cannot be used. ``extra`` extensions are added to the agent's own.
    """
    extensions: list[AgentExtension] = [] if store is None else [store]
    extensions.extend(extra)
    terminal = surface == "terminal"
    if terminal:
        extensions.append(SteeringExtension())
    extensions.append(AskUserExtension())
    extensions.append(FilesystemExtension(root, sandbox=sandbox))
    if terminal:
        extensions.append(BashExtension(root, sandbox=sandbox))
        extensions.append(
            CompactionExtension(
                threshold_tokens=config.compaction_threshold.value, keep_last=config.compaction_keep_last.value
            )
        )
    approvals: ToolApprovalExtension | None = None
    explicit = any(sourced.source != "default" for sourced in config.permissions.values())
    if terminal or explicit:
        approvals = ToolApprovalExtension(ToolPolicy(config.policy_rules))
        extensions.append(approvals)
    if plan_mode:
        extensions.append(PlanModeExtension(root=root, writable=tuple(config.plan_writable.value), sandbox=sandbox))
    if config.project is not None:
        extensions.append(AgentsMdExtension(config.project))
    if config.skills:
        extensions.append(SkillsExtension(config.skills))
    prompt = TERMINAL_PROMPT if terminal else SERVICE_PROMPT
    own_models = subagent_models(config)
    for subagent, _ in config.subagents:
        child_extensions: list[AgentExtension] = []
        child_tools: list[ToolDefinition] = []
        if subagent.tools is None:
            child_extensions.append(FilesystemExtension(root, sandbox=sandbox))
        else:
            allowed = set(subagent.tools)
            child_tools = [tool for tool in filesystem_tools(root, sandbox=sandbox) if tool.name in allowed]
        child = await create_agent(
            own_models.get(subagent.name, model),
            extensions=child_extensions,
            tools=child_tools,
            history=None,
            system_prompt=subagent.system_prompt,
        )
        extensions.append(SubAgentExtension(child, name=subagent.name, description=subagent.description))
    async with contextlib.AsyncExitStack() as stack:
        mcp: MCPExtension | None = None
        if config.started_servers:
            from orchestrator.extensions.mcp import MCPExtension

            mcp = await stack.enter_async_context(MCPExtension(config.started_servers))
            extensions.append(mcp)
        client = await create_agent(model, extensions=extensions, tools=tools, history=None, system_prompt=prompt)
        yield DefaultAgent(client, approvals, mcp, config)

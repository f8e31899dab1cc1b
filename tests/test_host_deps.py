"""``AgentHost`` passes a request's ``deps`` on to its tools (``context.deps``), for asyncio and blocking callers."""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator import AgentRunConfig, AssistantMessage, ModelRequest, ScriptedModel, ToolCall, create_agent, tool
from orchestrator.host import AgentHost
from orchestrator.runtime.context import AgentRunContext


class Tenant:
    def __init__(self, name: str) -> None:
        self.name = name


@tool
async def whoami(context: AgentRunContext) -> str:
    """Say which tenant the request acts for."""
    deps: Any = context.deps
    return "nobody" if deps is None else deps.name


def step(request: ModelRequest) -> AssistantMessage:
    last = request.messages[-1]
    if last.role == "user":
        return AssistantMessage("", (ToolCall("c1", "whoami", {}),))
    return AssistantMessage(f"acting for {last.content}")


def make_host() -> AgentHost:
    return AgentHost(lambda: create_agent(ScriptedModel([step], repeat_last=True), tools=[whoami]))


def test_a_host_gives_each_request_its_own_deps() -> None:
    async def main() -> list[str]:
        host = make_host()
        try:
            ran = await host.run("hi", config=AgentRunConfig("a"), deps=Tenant("acme"))
            started = await host.start("hi", config=AgentRunConfig("b"), deps=Tenant("globex"))
            result = await started.result()
            plain = await host.run("hi", config=AgentRunConfig("c"))
            return [ran.content, result.content, plain.content]
        finally:
            await host.aclose()

    assert asyncio.run(main()) == ["acting for acme", "acting for globex", "acting for nobody"]


def test_a_blocking_caller_passes_deps_too() -> None:
    with make_host() as host:
        assert host.sync.run("hi", config=AgentRunConfig("a"), deps=Tenant("initech")).content == "acting for initech"
        started = host.sync.start("hi", config=AgentRunConfig("b"), deps=Tenant("umbrella"))
        assert host.sync.result(started.request_id).content == "acting for umbrella"

"""An application module for ``serve --app tests.server.sample_app:ATTR``."""

from __future__ import annotations

from orchestrator import AgentClient, AssistantMessage, ScriptedModel, create_agent
from orchestrator.agent import Agent

agent = Agent(ScriptedModel([AssistantMessage("from the application's agent")], repeat_last=True))


async def make_client() -> AgentClient:
    return await create_agent(ScriptedModel([AssistantMessage("from a factory")], repeat_last=True))


not_an_agent = 42

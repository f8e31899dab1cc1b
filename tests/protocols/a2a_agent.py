"""The agent the A2A tests serve: it asks approval for ``deploy``, asks the user a question, and can be steered."""

from __future__ import annotations

import trio

from orchestrator import AgentClient, AssistantMessage, ScriptedModel, create_agent, tool
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.messages import ToolMessage, UserMessage
from orchestrator.model import ModelRequest
from tests.support import asks, call

DEPLOYS: list[str] = []
"""The ledger of deploys that really ran."""


@tool
def deploy(target: str) -> str:
    """Deploy the service to a target."""
    DEPLOYS.append(target)
    return f"deployed to {target}"


@tool(loop="trio")
async def slow_lookup(topic: str) -> str:
    """Look a topic up slowly."""
    await trio.sleep(1.0)
    return f"facts about {topic}"


def reply(request: ModelRequest) -> AssistantMessage:
    """Deploy on 'deploy', ask on 'ask', look up slowly on 'slow'; after a steer, say what it was told."""
    last = request.messages[-1]
    users = [m for m in request.messages if isinstance(m, UserMessage)]
    turn = len(request.messages)
    if isinstance(last, ToolMessage):
        if len(users) > 1 and "slow" in users[-2].text:
            return AssistantMessage(f"steered: {users[-1].text}")
        return AssistantMessage(f"done: {last.content}")
    text = last.text if isinstance(last, UserMessage) else ""
    if len(users) > 1 and "slow" in users[-2].text and text and "slow" not in text:
        return AssistantMessage(f"steered: {text}")
    if "deploy" in text:
        return asks(call(f"d{turn}", "deploy", target="staging"))
    if "ask" in text:
        return asks(call(f"q{turn}", "ask_user", question="Which colour?", options=["red", "blue"]))
    if "free" in text:
        return asks(call(f"f{turn}", "ask_user", question="What is your name?", options=[]))
    if "slow" in text:
        return asks(call(f"s{turn}", "slow_lookup", topic="tides"))
    return AssistantMessage(f"echo: {text}")


async def a2a_client() -> AgentClient:
    model = ScriptedModel([reply], repeat_last=True)
    return await create_agent(
        model,
        tools=[deploy, slow_lookup],
        extensions=[ToolApprovalExtension({"deploy": "ask"}), AskUserExtension()],
        system_prompt="A deploy assistant.\nIt deploys when approved.",
    )

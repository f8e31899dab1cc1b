"""The agent the ``cluster`` workload runs, in-process and in worker processes: a lookup, a question, an answer."""

from __future__ import annotations

from orchestrator import (
    AgentClient,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolCall,
    ToolMessage,
    create_agent,
    tool,
)
from orchestrator.extensions.ask_user import AskUserExtension


@tool(idempotent=True)
async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up
    """
    return f"value of {key}"


def _step(request: ModelRequest) -> AssistantMessage:
    names = [m.name for m in request.messages if isinstance(m, ToolMessage)]
    if "lookup" not in names:
        return AssistantMessage("", tool_calls=[ToolCall("l1", "lookup", {"key": "k"})])
    if "ask_user" not in names:
        return AssistantMessage(
            "", tool_calls=[ToolCall("q1", "ask_user", {"question": "Go on?", "options": ["yes", "no"]})]
        )
    return AssistantMessage("Done.")


async def approval_agent() -> AgentClient:
    return await create_agent(ScriptedModel([_step], repeat_last=True), tools=[lookup], extensions=[AskUserExtension()])

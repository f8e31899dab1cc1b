"""The agents of the agent-change tests, and a process that stops while a call waits for its approval.

``python -m tests.reliability.agent_change_apps park PATH`` runs a request on a session store at PATH until
``charge`` waits for its approval, then leaves at once (``os._exit``: nothing of the request is ended);
``... fingerprint`` prints the fingerprint of the first agent, as a store keeps it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import trio

from orchestrator import (
    AgentClient,
    AgentRunConfig,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolCall,
    ToolMessage,
    create_agent,
    tool,
)
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.extensions.tool_approval import ToolApprovalExtension

LEDGER: list[str] = []
"""Every real execution of ``charge`` and ``refund`` in this process."""


@tool
def charge(amount: int) -> str:
    """Charge the customer.

    Args:
        amount: in cents
    """
    LEDGER.append(f"charge {amount}")
    return f"charged {amount}"


@tool
def refund(amount: int) -> str:
    """Refund the customer.

    Args:
        amount: in cents
    """
    LEDGER.append(f"refund {amount}")
    return f"refunded {amount}"


def step(request: ModelRequest) -> AssistantMessage:
    """Call ``charge`` once, then answer with the last tool result."""
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    if not results:
        return AssistantMessage("", (ToolCall("c1", "charge", {"amount": 500}),))
    return AssistantMessage(f"Finished: {results[-1].content}")


async def agent(
    *, tools: tuple[Any, ...] = (charge, refund), policy: str = "ask", extensions: tuple[Any, ...] = (), **options: Any
) -> AgentClient:
    """The first agent by default: ``charge`` asks for approval; ``refund`` runs."""
    approval = ToolApprovalExtension({"charge": policy})
    return await create_agent(
        ScriptedModel([step], repeat_last=True), tools=list(tools), extensions=[approval, *extensions], **options
    )


async def _park(path: str) -> None:
    client = await agent(extensions=(SQLiteSessionStore(path),), history=None)
    async for event in client.stream("charge 5 dollars", config=AgentRunConfig(session_id="s1", request_id="r1")):
        if event.name == "tool_approval":
            print("waiting", flush=True)
            os._exit(0)  # the process stops here, as a deploy stops it


async def _fingerprint() -> None:
    print((await agent()).agent.fingerprint.text())


if __name__ == "__main__":
    if sys.argv[1] == "park":
        trio.run(_park, sys.argv[2])
    else:
        trio.run(_fingerprint)

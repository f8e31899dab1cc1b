"""Agents the durable-store defect tests run in worker processes (``--app tests.reliability.durable_apps:ATTR``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from orchestrator import AgentClient, AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from tests.support import asks, call

LEDGER = Path(os.environ.get("ORCHESTRATOR_TEST_MARKS", "/tmp/orchestrator-marks")) / "charges.log"


@tool(thread=True)
def charge(order: str, hold: float = 0.0) -> str:
    """Charge an order: a side effect that must not happen twice. Writes one ledger line per real execution.

    Args:
        order: the order to charge
        hold: seconds the charge takes after it was made
    """
    LEDGER.parent.mkdir(parents=True, exist_ok=True)
    with LEDGER.open("a", encoding="utf-8") as ledger:
        ledger.write(order + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    if hold:
        time.sleep(hold)
    return f"charged {order}"


def _step(request: ModelRequest) -> AssistantMessage:
    """charge (held 15 s when the input says long, 5 s when slow, 1 s when busy) -> a final answer naming the
    result."""
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    order = [m for m in request.messages if m.role == "user"][-1].text
    if not results:
        hold = 15.0 if "long" in order else 5.0 if "slow" in order else 1.0 if "busy" in order else 0.0
        return asks(call("c1", "charge", order=order, hold=hold))
    return AssistantMessage(f"Result: {results[-1].content}")


async def charge_agent() -> AgentClient:
    """Charges the order its input names, each charge approved by a person first."""
    return await create_agent(
        ScriptedModel([_step], repeat_last=True), tools=[charge], extensions=[ToolApprovalExtension({"charge": "ask"})]
    )


EXPIRES_AFTER = 4.0
"""How long ``expiring_charge_agent``'s approvals wait (long enough for a run to park first)."""


async def expiring_charge_agent() -> AgentClient:
    """``charge_agent`` whose approvals expire ``EXPIRES_AFTER`` seconds after they are asked: declined then."""
    return await create_agent(
        ScriptedModel([_step], repeat_last=True),
        tools=[charge],
        extensions=[ToolApprovalExtension({"charge": "ask"}, expires_after=EXPIRES_AFTER)],
    )

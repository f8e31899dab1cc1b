"""An agent's fingerprint: stable across processes, computed once, naming its parts; bad policies refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.runtime.fingerprint import AgentFingerprint, changes
from tests.reliability.agent_change_apps import agent, charge, refund

ROOT = Path(__file__).resolve().parents[1]


def _other_process() -> str:
    ran = subprocess.run(
        [sys.executable, "-m", "tests.reliability.agent_change_apps", "fingerprint"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


async def test_identical_agents_in_different_processes_have_one_fingerprint() -> None:
    here = (await agent()).agent.fingerprint
    assert _other_process() == here.text()
    assert (await agent()).agent.fingerprint == here  # a second agent of this process, too
    parsed = AgentFingerprint.parse(here.text())
    assert parsed == here and len(here.digest) == 64
    assert "0x" not in here.text()  # no object addresses


async def test_the_summary_names_the_model_tools_and_extensions_with_their_settings() -> None:
    fingerprint = (await agent()).agent.fingerprint
    assert fingerprint.model == "ScriptedModel"
    assert sorted(fingerprint.tools) == ["charge", "refund"]
    approval = fingerprint.extensions["ToolApprovalExtension"]
    assert approval == {
        "class": "orchestrator.extensions.tool_approval.ToolApprovalExtension",
        "settings": {"rules": {"charge": "ask"}, "default": "allow", "expires_after": None},
    }
    assert fingerprint.extensions["SteeringExtension"]["settings"] is None


async def test_a_callable_policy_is_named_not_addressed() -> None:
    def ask_above_a_dollar(call: object, arguments: dict[str, int], context: object) -> str:
        return "ask" if arguments.get("amount", 0) > 100 else "allow"

    client = await create_agent(
        ScriptedModel([AssistantMessage("hi")]), tools=[charge], extensions=[ToolApprovalExtension(ask_above_a_dollar)]
    )
    settings = client.agent.fingerprint.extensions["ToolApprovalExtension"]["settings"]
    assert settings["default"].endswith("test_a_callable_policy_is_named_not_addressed.<locals>.ask_above_a_dollar")


async def test_the_fingerprint_is_computed_once_per_agent() -> None:
    client = await agent()
    assert client.agent.fingerprint is client.agent.fingerprint


async def test_changes_name_what_differs() -> None:
    before = (await agent()).agent.fingerprint
    after = (await agent(tools=(refund,), policy="deny")).agent.fingerprint
    change = changes(before, after)
    assert change.tools_removed == ("charge",) and change.tools_added == () and change.tools_changed == ()
    assert change.extensions_changed == ("ToolApprovalExtension",)
    assert change.describe() == "tools removed: charge; extensions changed: ToolApprovalExtension"


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("ignore", ValueError, "Agent.on_agent_changed must be 'warn', 'refuse' or a callable, got 'ignore'"),
        (3, TypeError, "Agent.on_agent_changed must be 'warn', 'refuse' or a callable, got int"),
        (None, TypeError, "Agent.on_agent_changed must be 'warn', 'refuse' or a callable, got NoneType"),
    ],
)
async def test_a_bad_policy_is_refused_at_construction(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as raised:
        await create_agent(ScriptedModel([AssistantMessage("hi")]), on_agent_changed=value)  # type: ignore[arg-type]
    assert str(raised.value) == message

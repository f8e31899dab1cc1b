"""ToolApprovalExtension: allow, ask and deny per tool, remembered approvals, declines with reasons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from support import asks, call

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ScriptedModel,
    ToolMessage,
    ToolStatus,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent, TransitionEvent
from orchestrator.extensions.files.filesystem import FilesystemExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension, ToolPolicy

ran: list[str] = []


@tool
def write_note(text: str) -> str:
    """Write a note."""
    ran.append(text)
    return "noted"


@tool
def read_note() -> str:
    """Read the note."""
    return "a note"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def decisions(events: list[AgentEvent]) -> list[tuple[str, str, str]]:
    return [
        (e.source, e.trigger, e.dest) for e in events if isinstance(e, TransitionEvent) and e.machine == "tool_approval"
    ]


def results(events: list[AgentEvent]) -> list[ToolMessage]:
    return [
        e.payload["result"] for e in events if "result" in e.payload and isinstance(e.payload["result"], ToolMessage)
    ]


async def drive(client: Any, text: str, answers: list[dict[str, Any]], session: str = "s") -> list[AgentEvent]:
    """One request; each tool_approval event gets the next answer (its tool_call_id filled in)."""
    events: list[AgentEvent] = []
    with trio.fail_after(10):
        async for event in client.stream(text, config=AgentRunConfig(session)):
            events.append(event)
            if event.name == "tool_approval":
                reply = {"tool_call_id": event.payload["tool_call_id"], **answers.pop(0)}
                taken = client.agent.emit_external_event(
                    ExternalEvent(event.payload["response_event"], reply), config=AgentRunConfig(session)
                )
                assert taken == ["ToolApprovalExtension"]
    return events


async def test_an_ask_pauses_the_call_and_remember_allows_the_tool_for_the_session() -> None:
    model = ScriptedModel(
        [
            asks(call("c1", "write_note", text="one")),
            AssistantMessage("done"),
            asks(call("c2", "write_note", text="two")),
            AssistantMessage("done again"),
        ]
    )
    approvals = ToolApprovalExtension({"write_*": "ask"})
    client = await create_agent(model, tools=[write_note], extensions=[approvals])
    events = await drive(client, "note one", [{"approved": True, "remember": "session"}])
    [asked] = [e for e in events if e.name == "tool_approval"]
    assert dict(asked.payload) == {
        "tool_call_id": "c1",
        "name": "write_note",
        "arguments": {"text": "one"},
        "response_event": "tool_approval_response",
    }
    assert decisions(events) == [("deciding", "decide", "asking"), ("asking", "approve", "approved")]
    phases = [(e.source, e.dest) for e in events if isinstance(e, TransitionEvent) and e.region == "phase"]
    assert ("awaiting_tool", "awaiting_approval") in phases
    assert approvals.remembered("s") == {"write_note"}

    again = await drive(client, "note two", [])  # no answer needed: remembered for the session
    assert decisions(again) == [("deciding", "decide", "allowed")]
    assert ran == ["one", "two"]
    assert approvals.remembered("other") == frozenset()


async def test_a_decline_is_a_failed_result_that_carries_the_reason() -> None:
    model = ScriptedModel([asks(call("c1", "write_note", text="x")), AssistantMessage("ok")])
    client = await create_agent(model, tools=[write_note], extensions=[ToolApprovalExtension({"write_note": "ask"})])
    events = await drive(client, "note", [{"approved": False, "reason": "not in this folder"}])
    [result] = results(events)
    assert result.status == ToolStatus.FAILED
    assert result.content == "rejected: the user declined write_note: not in this folder"
    assert decisions(events) == [("deciding", "decide", "asking"), ("asking", "decline", "declined")]
    assert ran == []
    assert model.requests[1].messages[-1] == result


async def test_deny_refuses_without_asking_and_allow_runs_without_asking() -> None:
    model = ScriptedModel([asks(call("c1", "write_note", text="x"), call("c2", "read_note")), AssistantMessage("ok")])
    policy = ToolPolicy({"write_*": "ask", "write_note": "deny"}, default="allow")  # the exact name wins
    client = await create_agent(model, tools=[write_note, read_note], extensions=[ToolApprovalExtension(policy)])
    events = await drive(client, "go", [])
    by_id = {r.tool_call_id: r for r in results(events)}
    assert by_id["c1"].status == ToolStatus.FAILED
    assert by_id["c1"].content == "rejected: write_note is denied by the tool policy"
    assert by_id["c2"].status == ToolStatus.SUCCEEDED
    assert sorted(decisions(events)) == [("deciding", "decide", "allowed"), ("deciding", "decide", "denied")]
    assert not [e for e in events if e.name == "tool_approval"]


def test_policy_verdicts_patterns_and_invalid_policies() -> None:
    policy = ToolPolicy({"bash": "ask", "write_*": "deny", "*_file": "ask"}, default="allow")
    assert [policy.verdict(n) for n in ("bash", "write_file", "edit_file", "read", "bash2")] == [
        "ask",
        "deny",
        "ask",
        "allow",
        "allow",
    ]
    with pytest.raises(ValueError, match="maybe"):
        ToolApprovalExtension({"bash": "maybe"})
    with pytest.raises(ValueError, match="default"):
        ToolApprovalExtension({}, default="sometimes")
    with pytest.raises(ValueError, match="non-empty"):
        ToolPolicy({"": "allow"})


async def test_malformed_stray_and_late_answers_are_refused() -> None:
    model = ScriptedModel([asks(call("c1", "write_note", text="x")), AssistantMessage("ok")])
    client = await create_agent(model, tools=[write_note], extensions=[ToolApprovalExtension({"write_note": "ask"})])
    config = AgentRunConfig("s")

    def answer(payload: dict[str, Any]) -> list[str]:
        taken: list[str] = client.agent.emit_external_event(
            ExternalEvent("tool_approval_response", payload), config=config
        )
        return taken

    with trio.fail_after(10):
        async for event in client.stream("go", config=config):
            if event.name == "tool_approval":
                assert answer({"tool_call_id": "c1", "approved": "yes"}) == []
                assert answer({"tool_call_id": "c1", "approved": True, "remember": "forever"}) == []
                assert answer({"tool_call_id": "c1", "approved": False, "reason": 7}) == []
                assert answer({"tool_call_id": "other", "approved": True}) == []
                assert answer({"tool_call_id": "c1", "approved": True}) == ["ToolApprovalExtension"]
                assert answer({"tool_call_id": "c1", "approved": True}) == []  # a duplicate
    assert ran == ["x"]


async def test_cancelling_while_asking_withdraws_the_decision() -> None:
    model = ScriptedModel([asks(call("c1", "write_note", text="x"))])
    approvals = ToolApprovalExtension({"write_note": "ask"})
    client = await create_agent(model, tools=[write_note], extensions=[approvals])
    events: list[AgentEvent] = []
    with trio.fail_after(10):
        async with client.stream("go", config=AgentRunConfig("s")) as stream:
            async for event in stream:
                events.append(event)
                if event.name == "tool_approval":
                    await stream.aclose()
            events.extend([e async for e in stream])
    assert decisions(events) == [("deciding", "decide", "asking"), ("asking", "withdraw", "withdrawn")]
    [result] = results(events)
    assert result.status == ToolStatus.CANCELLED
    assert approvals.router.waiting() == []
    assert ran == []


# Plan Mode may confine writes ---------------------------------------------------


async def _plan_then_write(tmp_path: Path, planner: PlanModeExtension, paths: list[str]) -> dict[str, ToolMessage]:
    writes = [call(f"w{i}", "write_file", path=p, content="plan\n") for i, p in enumerate(paths)]
    model = ScriptedModel(
        [asks(call("e", "enter_plan_mode", reason="think")), asks(*writes), AssistantMessage("planned")]
    )
    client = await create_agent(model, extensions=[FilesystemExtension(tmp_path), planner])
    found: dict[str, ToolMessage] = {}
    with trio.fail_after(10):
        async for event in client.stream("plan it", config=AgentRunConfig("p")):
            if event.name == "enter_plan_mode":
                reply = {"tool_call_id": "e", "approved": True}
                client.agent.emit_external_event(
                    ExternalEvent("enter_plan_mode_response", reply), config=AgentRunConfig("p")
                )
            result = event.payload.get("result")
            if isinstance(result, ToolMessage) and result.name == "write_file":
                found[result.tool_call_id] = result
    return found


async def test_plan_mode_writable_admits_writes_only_under_its_patterns(tmp_path: Path) -> None:
    planner = PlanModeExtension(root=tmp_path, writable=("PLAN.md", "plans/**"))
    assert "write_file and edit_file may change only: PLAN.md, plans/**" in planner.system_prompt
    found = await _plan_then_write(tmp_path, planner, ["PLAN.md", "plans/a/b.md", "src/app.py", "plans/../app.py"])
    assert [found[f"w{i}"].status for i in range(4)] == [
        ToolStatus.SUCCEEDED,
        ToolStatus.SUCCEEDED,
        ToolStatus.FAILED,
        ToolStatus.FAILED,
    ]
    assert found["w2"].content == "rejected: Plan Mode may write only PLAN.md, plans/**; 'src/app.py' is outside"
    assert (tmp_path / "PLAN.md").read_text() == "plan\n"
    assert (tmp_path / "plans" / "a" / "b.md").exists()
    assert not (tmp_path / "src").exists() and not (tmp_path / "app.py").exists()


async def test_plan_mode_without_writable_admits_writes_anywhere(tmp_path: Path) -> None:
    found = await _plan_then_write(tmp_path, PlanModeExtension(root=tmp_path), ["src/app.py"])
    assert found["w0"].status == ToolStatus.SUCCEEDED
    assert (tmp_path / "src" / "app.py").read_text() == "plan\n"


def test_writable_must_be_patterns() -> None:
    with pytest.raises(TypeError):
        PlanModeExtension(writable="PLAN.md")
    with pytest.raises(ValueError):
        PlanModeExtension(writable=("",))


async def test_plan_mode_refuses_a_write_outside_writable_before_anyone_is_asked(tmp_path: Path) -> None:
    approvals = ToolApprovalExtension({"write_file": "ask"})
    planner = PlanModeExtension(root=tmp_path, writable=("PLAN.md",))
    model = ScriptedModel(
        [
            asks(call("e", "enter_plan_mode", reason="think")),
            asks(call("w", "write_file", path="src/app.py", content="x")),
            AssistantMessage("planned"),
        ]
    )
    client = await create_agent(model, extensions=[FilesystemExtension(tmp_path), planner, approvals])
    asked: list[str] = []
    with trio.fail_after(10):
        async for event in client.stream("plan it", config=AgentRunConfig("p")):
            asked.append(event.name)
            if event.name == "enter_plan_mode":
                reply = ExternalEvent("enter_plan_mode_response", {"tool_call_id": "e", "approved": True})
                client.agent.emit_external_event(reply, config=AgentRunConfig("p"))
    assert "tool_approval" not in asked
    [result] = [m for m in client.agent.history.load("p") if isinstance(m, ToolMessage) and m.name == "write_file"]
    assert result.content.startswith("rejected: Plan Mode may write only PLAN.md")


async def test_plan_mode_writable_follows_symlinks_to_where_a_write_would_land(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("original\n")
    (tmp_path / "PLAN.md").symlink_to(tmp_path / "src" / "app.py")
    (tmp_path / "plans").symlink_to(tmp_path / "src", target_is_directory=True)
    planner = PlanModeExtension(root=tmp_path, writable=("PLAN.md", "plans/**"))
    found = await _plan_then_write(tmp_path, planner, ["PLAN.md", "plans/app.py", "plans/new/deep.md"])
    assert [found[f"w{i}"].status for i in range(3)] == [ToolStatus.FAILED] * 3
    assert (tmp_path / "src" / "app.py").read_text() == "original\n"
    assert not (tmp_path / "src" / "new").exists()

"""SQLiteSessionStore: durable history, repair after a kill, pending approvals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import trio
from support import asks, call

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ImagePart,
    Message,
    ScriptedModel,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.session_store import SessionStoreExtension
from orchestrator.extensions.sqlite_store import STOPPED, SQLiteSessionStore, decode_message, encode_message, repair
from orchestrator.store import SessionChange, SQLiteStore

REPO = Path(__file__).resolve().parents[1]


def results_per_call(messages: list[Message]) -> dict[str, int]:
    """How many results each tool call of ``messages`` has (calls without one included)."""
    counts: Counter[str] = Counter()
    for message in messages:
        if isinstance(message, AssistantMessage):
            for c in message.tool_calls:
                counts[c.id] += 0
        elif isinstance(message, ToolMessage):
            counts[message.tool_call_id] += 1
    return dict(counts)


@tool
def upper(text: str) -> str:
    """Upper-case a text.

    Args:
        text: the text
    """
    return text.upper()


# plain storage ---------------------------------------------------------------


def test_every_message_kind_survives_the_codec() -> None:
    messages: list[Message] = [
        SystemMessage("be brief"),
        UserMessage(
            (TextPart("look"), ImagePart(data=b"\x89PNG", media_type="image/png"), ImagePart(url="http://x/y"))
        ),
        AssistantMessage(
            "calling", [call("c1", "upper", text="ünï"), ToolCall("c2", "upper", {}, "{")]
        ),
        ToolMessage("c1", "upper", "ÜNÏ", ToolStatus.SUCCEEDED),
        ToolMessage("c2", "up", "bad", ToolStatus.FAILED),
        AssistantMessage("done"),
    ]
    assert [decode_message(encode_message(m)) for m in messages] == messages


def test_repair_places_each_missing_result_after_its_calls_results() -> None:
    broken: list[Message] = [
        UserMessage("go"),
        AssistantMessage("", [call("a", "t"), call("b", "t")]),
        ToolMessage("a", "t", "ok"),
        UserMessage("later"),
        AssistantMessage("", [call("c", "t")]),
    ]
    assert repair(broken) == [
        UserMessage("go"),
        AssistantMessage("", [call("a", "t"), call("b", "t")]),
        ToolMessage("a", "t", "ok"),
        ToolMessage("b", "t", STOPPED, ToolStatus.CANCELLED),
        UserMessage("later"),
        AssistantMessage("", [call("c", "t")]),
        ToolMessage("c", "t", STOPPED, ToolStatus.CANCELLED),
    ]
    assert repair(broken[:3], keep_open=frozenset({"b"})) == broken[:3]


def test_the_database_uses_write_ahead_logging(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    assert store.store.connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


# through an agent -------------------------------------------------------------


async def test_every_message_is_stored_and_a_new_agent_continues(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SQLiteSessionStore(db)
    stored_at_tool: list[list[Message]] = []

    @tool
    def peek(text: str) -> str:
        """Look at what is stored so far.

        Args:
            text: ignored
        """
        stored_at_tool.append(SQLiteSessionStore(db).messages("s"))
        return text.upper()

    first = ScriptedModel([asks(call("c1", "peek", text="hi")), AssistantMessage("HI it is")])
    client = await create_agent(first, tools=[peek], history=None, extensions=[store], system_prompt="sys")
    await client.run("shout hi", config=AgentRunConfig("s"))
    stored = store.messages("s")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored_at_tool == [stored[:2]]  # committed before the tool ran
    assert store.sessions() == ["s"]

    second = ScriptedModel([AssistantMessage("again")])
    store2 = SQLiteSessionStore(db)
    client2 = await create_agent(second, history=None, extensions=[store2], system_prompt="sys")
    await client2.run("once more", config=AgentRunConfig("s"))
    assert second.requests[0].messages == (SystemMessage("sys"), *stored, UserMessage("once more"))
    assert store2.messages("s") == [*stored, UserMessage("once more"), AssistantMessage("again")]


async def test_results_of_concurrent_calls_are_stored_in_the_order_they_were_appended(tmp_path: Path) -> None:
    class SlowDisk(SQLiteStore):
        """The first result's write is slow, so the second one's thread reaches the database first."""

        def apply(self, session_id: str, change: SessionChange) -> None:
            if any(isinstance(m, ToolMessage) and m.tool_call_id == "a" for _, m in change.append):
                time.sleep(0.05)
            super().apply(session_id, change)

    @tool
    async def nap(seconds: float) -> str:
        """Sleep.

        Args:
            seconds: how long
        """
        await trio.sleep(seconds)
        return str(seconds)

    store = SessionStoreExtension(SlowDisk(tmp_path / "s.db"))
    model = ScriptedModel([asks(call("a", "nap", seconds=0.0), call("b", "nap", seconds=0.01)), AssistantMessage("ok")])
    client = await create_agent(model, tools=[nap], history=None, extensions=[store])
    await client.run("go", config=AgentRunConfig("s"))
    assert [getattr(m, "tool_call_id", m.role) for m in model.requests[1].messages] == ["user", "assistant", "a", "b"]
    assert store.messages("s") == [*model.requests[1].messages, AssistantMessage("ok")]


async def test_the_store_refuses_to_share_history_with_another_keeper(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    client = await create_agent(ScriptedModel([AssistantMessage("x")]), extensions=[store])  # default history
    with pytest.raises(TypeError, match="history=None"):
        await client.run("hi")


async def test_pending_approval_is_stored_while_waiting_and_removed_when_answered(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    plan = PlanModeExtension(root=tmp_path)
    model = ScriptedModel([asks(call("p1", "enter_plan_mode", reason="risky change")), AssistantMessage("ok")])
    client = await create_agent(model, history=None, extensions=[store, plan])
    seen = []
    with trio.fail_after(5):
        async for event in client.stream("refactor", config=AgentRunConfig("s")):
            if event.name == "enter_plan_mode":  # stored before anyone could see the question
                [pending] = store.pending_approvals()
                seen.append(pending)
                assert store.pending_approvals("other") == []
                reply = ExternalEvent(event.payload["response_event"], {"tool_call_id": "p1", "approved": True})
                assert client.agent.emit_external_event(reply, config=AgentRunConfig("s")) == ["PlanModeExtension"]
    [pending] = seen
    assert (pending.session_id, pending.tool_call_id, pending.event) == ("s", "p1", "enter_plan_mode")
    assert pending.response_event == "enter_plan_mode_response"
    assert pending.payload["reason"] == "risky change"
    assert pending.response is None
    assert store.pending_approvals() == []


async def test_a_cancelled_request_leaves_no_pending_approval(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    client = await create_agent(
        ScriptedModel([asks(call("q", "ask_user", question="Which?", options=[]))]),
        history=None,
        extensions=[store, AskUserExtension()],
    )
    with trio.move_on_after(5) as scope:
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "ask_user":
                assert [p.tool_call_id for p in store.pending_approvals("s")] == ["q"]
                scope.cancel()
    assert store.pending_approvals() == []
    assert store.messages("s")[-1] == ToolMessage("q", "ask_user", "not completed: request cancelled", "cancelled")
    answer = ExternalEvent("ask_user_response", {"tool_call_id": "q", "answer": "late"})
    assert client.agent.emit_external_event(answer, config=AgentRunConfig("s")) == []


async def test_plan_mode_carries_over_to_the_next_process(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    config = AgentRunConfig("s")
    first = ScriptedModel([asks(call("p1", "enter_plan_mode", reason="big change")), AssistantMessage("planning")])
    client = await create_agent(
        first, history=None, extensions=[SQLiteSessionStore(db), PlanModeExtension(root=tmp_path)], system_prompt="sys"
    )
    with trio.fail_after(5):
        async for event in client.stream("refactor", config=config):
            if event.name == "enter_plan_mode":
                reply = ExternalEvent("enter_plan_mode_response", {"tool_call_id": "p1", "approved": True})
                client.agent.emit_external_event(reply, config=config)
    assert SQLiteSessionStore(db).plan_mode("s") == "plan_active"

    # a new process: a fresh store and a PlanModeExtension that never saw the session
    plan = PlanModeExtension(root=tmp_path)
    second = ScriptedModel([asks(call("x1", "exit_plan_mode", plan="1. do it")), AssistantMessage("implementing")])
    again = await create_agent(second, history=None, extensions=[SQLiteSessionStore(db), plan], system_prompt="sys")
    names: list[str] = []
    with trio.fail_after(5):
        async for event in again.stream("go on", config=config):
            names.append(event.name)
            if event.name == "exit_plan_mode":
                assert plan.is_plan_mode("s")
                reply = ExternalEvent("exit_plan_mode_response", {"tool_call_id": "x1", "approved": True})
                assert again.agent.emit_external_event(reply, config=config) == ["PlanModeExtension"]
    assert names.index("plan_mode_restored") < names.index("exit_plan_mode") < names.index("plan_mode_exited")
    request = second.requests[0]
    assert request.messages[0] == SystemMessage(plan.system_prompt)  # the Plan Mode prompt, not "sys"
    offered = {definition.name for definition in request.tools}
    assert "exit_plan_mode" in offered and "enter_plan_mode" not in offered
    assert second.requests[1].messages[0] == SystemMessage("sys")
    assert not plan.is_plan_mode("s")
    assert SQLiteSessionStore(db).plan_mode("s") == "normal"
    result = SQLiteSessionStore(db).messages("s")[-2]
    assert isinstance(result, ToolMessage) and result.tool_call_id == "x1"
    assert result.status == ToolStatus.SUCCEEDED


# the kill test ----------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    import trio
    from orchestrator import AgentExtension, AgentRunConfig, AssistantMessage, ScriptedModel, ToolCall
    from orchestrator import create_agent, tool
    from orchestrator.extensions.ask_user import AskUserExtension
    from orchestrator.extensions.sqlite_store import SQLiteSessionStore

    @tool(serial=True)
    def quick(text: str) -> str:
        '''Echo.

        Args:
            text: the text
        '''
        return text

    @tool
    async def slow(text: str) -> str:
        '''Take forever.

        Args:
            text: the text
        '''
        await trio.sleep(600)
        return "never"

    class Ready(AgentExtension):
        priority = 100  # after the store has recorded the question

        async def on_event(self, context, event):
            if event.name == "ask_user":
                print("READY", flush=True)

    async def main() -> None:
        store = SQLiteSessionStore(sys.argv[1])
        model = ScriptedModel([
            AssistantMessage("first", [ToolCall("c1", "quick", {"text": "a"})]),
            AssistantMessage("then", [
                ToolCall("c2", "quick", {"text": "b"}),
                ToolCall("c3", "slow", {"text": "c"}),
                ToolCall("q1", "ask_user", {"question": "Proceed?", "options": ["yes", "no"]}),
            ]),
        ])
        client = await create_agent(
            model, tools=[quick, slow], history=None, extensions=[store, AskUserExtension(), Ready()],
            system_prompt="sys",
        )
        await client.run("work hard", config=AgentRunConfig("killed"))

    trio.run(main)
    """
)


@tool(serial=True)
def quick(text: str) -> str:
    """Echo.

    Args:
        text: the text
    """
    return text


@tool
def slow(text: str) -> str:
    """The restarted process's version: quick.

    Args:
        text: the text
    """
    return f"done {text}"


def killed_session(tmp_path: Path) -> Path:
    """Run the child until a tool sleeps and a question waits, SIGKILL it, return its database."""
    db = tmp_path / "s.db"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(script), str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    guard = threading.Timer(30, child.kill)
    guard.start()
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "READY", child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
    finally:
        guard.cancel()
    return db


def test_a_killed_process_leaves_history_a_new_agent_continues(tmp_path: Path) -> None:
    store = SQLiteSessionStore(killed_session(tmp_path))
    before = store.messages("killed")
    assert results_per_call(before) == {"c1": 1, "c2": 1, "c3": 0, "q1": 0}
    [pending] = store.pending_approvals("killed")
    assert (pending.tool_call_id, pending.event, pending.payload["question"]) == ("q1", "ask_user", "Proceed?")
    assert pending.payload["options"] == ["yes", "no"]

    model = ScriptedModel([AssistantMessage("picking up where we left off")])

    async def resume() -> None:
        client = await create_agent(model, history=None, extensions=[store], system_prompt="sys")
        answer = await client.run("continue", config=AgentRunConfig("killed"))
        assert answer.content == "picking up where we left off"

    trio.run(resume)
    after = store.messages("killed")
    assert results_per_call(after) == {"c1": 1, "c2": 1, "c3": 1, "q1": 1}
    cancelled = {m.tool_call_id: m.content for m in after if isinstance(m, ToolMessage) and m.status == "cancelled"}
    assert cancelled == {"c3": STOPPED, "q1": STOPPED}
    assert after[: len(before)] == before
    seen = model.requests[0].messages
    assert seen[0] == SystemMessage("sys")
    assert list(seen[1:]) == after[:-1]
    assert seen[-1] == UserMessage("continue")
    assert store.pending_approvals() == []


def test_an_answer_given_after_the_kill_becomes_the_waiting_calls_result_in_the_recorded_order(
    tmp_path: Path,
) -> None:
    store = SQLiteSessionStore(killed_session(tmp_path))
    before = store.messages("killed")
    model = ScriptedModel([AssistantMessage("resumed with the answer")])
    names: list[str] = []

    async def resume() -> None:
        ask = AskUserExtension()
        client = await create_agent(
            model, tools=[quick, slow], history=None, extensions=[store, ask], system_prompt="sys"
        )
        agent, config = client.agent, AgentRunConfig("killed")
        wrong = ExternalEvent("ask_user_response", {"tool_call_id": "zz", "answer": "yes"})
        invalid = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "maybe"})
        not_text = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": 1})
        answer = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "yes"})
        assert agent.emit_external_event(wrong, config=config) == []
        assert agent.deliver(wrong, config=config).refused == {
            "SQLiteSessionStore": "no stored waiting call tool_call_id='zz' in session 'killed'",
            "AskUserExtension": "no waiting call tool_call_id='zz' in session 'killed'",
        }
        misnamed = ExternalEvent("enter_plan_mode_response", {"tool_call_id": "q1", "approved": True})
        assert agent.deliver(misnamed, config=config).refused == {
            "SQLiteSessionStore": "stored call tool_call_id='q1' waits for 'ask_user_response', "
            "not 'enter_plan_mode_response'"
        }
        assert agent.deliver(invalid, config=config).refused == {  # checked like a live answer
            "SQLiteSessionStore": "'answer' must be one of ['yes', 'no']",
            "AskUserExtension": "no waiting call tool_call_id='q1' in session 'killed'",
        }
        assert agent.emit_external_event(not_text, config=config) == []
        [pending] = store.pending_approvals("killed")
        assert pending.response is None  # a refused answer changes nothing
        assert agent.emit_external_event(answer, config=config) == ["SQLiteSessionStore"]
        again = agent.deliver(answer, config=config)  # recorded once
        assert (
            not again and again.refused["SQLiteSessionStore"] == "stored call tool_call_id='q1' already has a response"
        )
        [pending] = store.pending_approvals("killed")
        assert pending.response == {"tool_call_id": "q1", "answer": "yes"}
        with trio.fail_after(5):
            async for event in client.stream("continue", config=config):
                names.append(event.name)
        assert ask.router.waiting() == []

    trio.run(resume)
    assert "approval_resumed" in names and "ask_user" not in names  # answered, not asked again
    assert names.index("approval_resumed") < names.index("model_started")
    [request] = model.requests
    interrupted = before[3]
    assert isinstance(interrupted, AssistantMessage) and [c.id for c in interrupted.tool_calls] == ["c2", "c3", "q1"]
    after = store.messages("killed")
    # the interrupted message and its results stay where they were recorded, before the new input
    assert after == [
        *before,
        ToolMessage("c3", "slow", STOPPED, ToolStatus.CANCELLED),
        ToolMessage("q1", "ask_user", "yes", ToolStatus.SUCCEEDED),
        UserMessage("continue"),
        AssistantMessage("resumed with the answer"),
    ]
    assert list(request.messages) == [SystemMessage("sys"), *after[:-1]]
    assert store.pending_approvals() == []

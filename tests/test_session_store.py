"""Session stores: writes that fail alone, unreadable rows, cancellation, restart answers, ownership, migration."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from support import asks, call

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    Message,
    ScriptedModel,
    SystemMessage,
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
from orchestrator.extensions.sqlite_store import STOPPED, SQLiteSessionStore
from orchestrator.store import (
    SCHEMA_VERSION,
    MemoryStore,
    PendingApproval,
    SchemaTooNew,
    SessionChange,
    SessionLocked,
    SQLiteStore,
    StoreError,
    problems,
    repair,
)

REPO = Path(__file__).resolve().parents[1]
V1_DB = REPO / "tests" / "fixtures" / "store" / "v1.db"


@tool
def echo(text: str) -> str:
    """Echo.

    Args:
        text: the text
    """
    return text


# item: one message must not poison the writer -----------------------------------


async def test_a_lone_surrogate_is_stored_cleaned_and_poisons_no_later_write(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    model = ScriptedModel(
        [asks(call("c1", "echo", text="name-\udc80-\ud83d\ude00")), AssistantMessage("bad \ud800 end"), AssistantMessage("b")]
    )
    client = await create_agent(model, tools=[echo], history=None, extensions=[store])
    with trio.fail_after(10):
        await client.run("lone \udcff", config=AgentRunConfig("a"))
        await client.run("fine", config=AgentRunConfig("b"))
    stored = store.messages("a")
    assert stored[0] == UserMessage("lone \ufffd")
    assert stored[2] == ToolMessage("c1", "echo", "name-\ufffd-\U0001f600")  # a split pair is joined
    assert stored[3] == AssistantMessage("bad \ufffd end")
    assert store.messages("b") == [UserMessage("fine"), AssistantMessage("b")]


async def test_a_message_that_cannot_be_stored_fails_only_its_own_request(tmp_path: Path) -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    store = SQLiteSessionStore(tmp_path / "s.db")

    def step(request: Any) -> AssistantMessage:
        if request.messages[-1] == UserMessage("poison"):
            return AssistantMessage("", [ToolCall("p1", "echo", circular)])
        return AssistantMessage("saved")

    client = await create_agent(ScriptedModel([step], repeat_last=True), tools=[echo], history=None, extensions=[store])
    with trio.fail_after(10):
        with pytest.raises(StoreError, match="cannot be stored"):
            await client.run("poison", config=AgentRunConfig("a"))
        await client.run("after", config=AgentRunConfig("b"))
        await client.run("again", config=AgentRunConfig("a"))
    assert store.messages("b") == [UserMessage("after"), AssistantMessage("saved")]
    stored = store.messages("a")  # nothing after the failed write was stored, so the session stays usable
    assert stored == [UserMessage("poison"), UserMessage("again"), AssistantMessage("saved")]


# item: unreadable rows -------------------------------------------------------------


def _insert_raw(path: Path, session_id: str, rows: list[tuple[str, str]]) -> None:
    db = sqlite3.connect(path)
    with db:
        for position, (role, body) in enumerate(rows):
            db.execute(
                "INSERT INTO messages (session_id, position, role, body, created) VALUES (?, ?, ?, ?, 0)",
                (session_id, position, role, body),
            )
    db.close()


def _body(message: Message) -> str:
    from orchestrator.store import encode_message

    return encode_message(message)


async def test_an_unreadable_row_is_reported_once_and_replaced_by_a_marked_placeholder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    SQLiteSessionStore(path).close()
    _insert_raw(
        path,
        "s",
        [
            ("user", _body(UserMessage("first"))),
            ("user", "{not json"),
            ("assistant", _body(asks(call("c1", "echo", text="x"), call("c2", "echo", text="y")))),
            ("tool", _body(ToolMessage("c1", "echo", "x"))),
            ("tool", json.dumps({"role": "tool", "tool_call_id": "c2", "name": "echo", "content": "y", "status": "?"})),
            ("alien", json.dumps({"role": "alien"})),
            ("assistant", _body(AssistantMessage("ok"))),
        ],
    )
    store = SQLiteSessionStore(path)
    model = ScriptedModel([AssistantMessage("one"), AssistantMessage("two")])
    client = await create_agent(model, tools=[echo], history=None, extensions=[store])
    reported: list[dict[str, Any]] = []
    with trio.fail_after(10), caplog.at_level(logging.WARNING, logger="orchestrator.store"):
        for text in ("go on", "and on"):
            async for event in client.stream(text, config=AgentRunConfig("s")):
                if event.name == "stored_message_unreadable":
                    reported.append(dict(event.payload))
    assert [r["row_id"] for r in reported] == [2, 5, 6]  # once each, by row id, in the first request only
    assert "not JSON" in reported[0]["reason"] and "unknown tool status" in reported[1]["reason"]
    assert [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()][0].startswith(
        "stored message 2 of session s is unreadable"
    )
    seen = list(model.requests[0].messages)
    assert problems(seen) == []
    marked = [m for m in seen if isinstance(m, UserMessage) and m.text.startswith("[unreadable stored message (row")]
    assert len(marked) == 3
    c2 = [m for m in seen if isinstance(m, ToolMessage) and m.tool_call_id == "c2"]
    assert c2 == [ToolMessage("c2", "echo", STOPPED, ToolStatus.CANCELLED)]
    assert problems(list(model.requests[1].messages)) == []
    kept = [(row.row_id, row.body) for row in store.store.quarantined("s")]
    assert kept[0] == (2, "{not json")


# item: appended while cancelled -----------------------------------------------------


async def test_a_message_appended_while_its_request_is_cancelled_is_still_committed(tmp_path: Path) -> None:
    class CancelOnInput(AgentExtension):
        def __init__(self, scope: trio.CancelScope) -> None:
            self.scope = scope

        async def on_message(self, context: Any) -> None:
            self.scope.cancel()  # the request is cancelled just before its input is appended

    path = tmp_path / "s.db"
    store = SQLiteSessionStore(path)
    with trio.fail_after(10):
        with trio.CancelScope() as scope:
            client = await create_agent(
                ScriptedModel([AssistantMessage("never")]), history=None, extensions=[store, CancelOnInput(scope)]
            )
            await client.run("remember me", config=AgentRunConfig("s"))
    assert scope.cancelled_caught
    assert SQLiteSessionStore(path).messages("s") == [UserMessage("remember me")]


# item: answers after a restart ----------------------------------------------------------


def _stopped_plan_proposal(path: Path) -> SQLiteSessionStore:
    """A session whose process stopped while enter_plan_mode waited for the user."""
    store = SQLiteSessionStore(path)
    store.store.apply(
        "s",
        SessionChange(
            append=((0, UserMessage("plan it")), (1, asks(call("p1", "enter_plan_mode", reason="big")))),
            plan_mode="entry_awaiting_approval",
        ),
    )
    asked = {"tool_call_id": "p1", "reason": "big", "response_event": "enter_plan_mode_response"}
    store.store.record_wait(PendingApproval("s", "r0", "p1", "enter_plan_mode", asked["response_event"], asked, None, 0))
    return store


async def test_a_plan_answer_after_a_restart_is_checked_like_a_live_one(tmp_path: Path) -> None:
    store = _stopped_plan_proposal(tmp_path / "s.db")
    plan = PlanModeExtension(root=tmp_path)
    model = ScriptedModel([AssistantMessage("planning now")])
    client = await create_agent(model, history=None, extensions=[store, plan], system_prompt="sys")
    config = AgentRunConfig("s")
    for bad in ({"tool_call_id": "p1", "approved": "yes"}, {"tool_call_id": "p1"}, {"tool_call_id": "p1", "approved": 1}):
        assert client.agent.emit_external_event(ExternalEvent("enter_plan_mode_response", bad), config=config) == []
    assert store.pending_approvals("s")[0].response is None
    good = ExternalEvent("enter_plan_mode_response", {"tool_call_id": "p1", "approved": True})
    assert client.agent.emit_external_event(good, config=config) == ["SQLiteSessionStore"]
    names: list[str] = []
    with trio.fail_after(10):
        async for event in client.stream("go", config=config):
            names.append(event.name)
    assert {"approval_resumed", "plan_mode_entered", "plan_mode_restored"} <= set(names)
    assert plan.is_plan_mode("s")
    [request] = model.requests
    assert request.messages[0] == SystemMessage(plan.system_prompt)
    assert "exit_plan_mode" in {t.name for t in request.tools}
    result = request.messages[3]
    assert isinstance(result, ToolMessage) and (result.tool_call_id, result.status) == ("p1", ToolStatus.SUCCEEDED)
    assert request.messages[4] == UserMessage("go")
    assert store.plan_mode("s") == "plan_active"


async def test_a_declined_plan_after_a_restart_is_a_failed_result_and_normal_mode(tmp_path: Path) -> None:
    store = _stopped_plan_proposal(tmp_path / "s.db")
    plan = PlanModeExtension(root=tmp_path)
    model = ScriptedModel([AssistantMessage("ok, normal")])
    client = await create_agent(model, history=None, extensions=[store, plan])
    no = ExternalEvent("enter_plan_mode_response", {"tool_call_id": "p1", "approved": False})
    assert client.agent.emit_external_event(no, config=AgentRunConfig("s")) == ["SQLiteSessionStore"]
    with trio.fail_after(10):
        await client.run("go", config=AgentRunConfig("s"))
    result = model.requests[0].messages[2]
    assert isinstance(result, ToolMessage) and result.status == ToolStatus.FAILED
    assert "declined" in result.content
    assert not plan.is_plan_mode("s") and store.plan_mode("s") == "normal"


# item: replay order and reused call ids ------------------------------------------------


async def test_a_call_id_reused_across_turns_and_a_kill_leave_history_well_formed(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    killed: list[Message] = [
        UserMessage("one"),
        asks(call("c1", "echo", text="a")),
        ToolMessage("c1", "echo", "a"),
        AssistantMessage("done one"),
        UserMessage("two"),
        asks(call("c1", "echo", text="b")),  # the model reused the id; the process died before the result
    ]
    store.store.apply("s", SessionChange(append=tuple(enumerate(killed))))
    model = ScriptedModel([AssistantMessage("three done")])
    client = await create_agent(model, tools=[echo], history=None, extensions=[store])
    with trio.fail_after(10):
        await client.run("three", config=AgentRunConfig("s"))
    seen = list(model.requests[0].messages)
    assert problems(seen) == []
    assert seen[6] == ToolMessage("c1", "echo", STOPPED, ToolStatus.CANCELLED)
    assert problems(store.messages("s")) == []


def test_repair_mends_any_order_and_marks_stray_results() -> None:
    broken: list[Message] = [
        ToolMessage("x", "t", "stray"),
        asks(call("a", "t"), call("b", "t")),
        UserMessage("steer"),
        ToolMessage("b", "t", "late"),
    ]
    mended = repair(broken)
    assert problems(broken) and problems(mended) == []
    assert isinstance(mended[0], UserMessage) and "stray" in mended[0].text
    assert mended[1:] == [
        asks(call("a", "t"), call("b", "t")),
        ToolMessage("b", "t", "late"),
        ToolMessage("a", "t", STOPPED, ToolStatus.CANCELLED),
        UserMessage("steer"),
    ]


# item: one runner per session ------------------------------------------------------------


async def test_a_second_store_running_the_same_session_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = SQLiteSessionStore(path)
    asking = ScriptedModel([asks(call("q", "ask_user", question="Go?", options=[])), AssistantMessage("went")])
    client = await create_agent(asking, history=None, extensions=[first, AskUserExtension()])
    second = SQLiteSessionStore(path)
    other = await create_agent(ScriptedModel([AssistantMessage("x")], repeat_last=True), history=None, extensions=[second])
    config = AgentRunConfig("s")
    with trio.fail_after(10):
        async for event in client.stream("start", config=config):
            if event.name == "ask_user":
                with pytest.raises(SessionLocked) as refused:
                    await other.run("intruder", config=config)
                assert refused.value.session_id == "s" and f"process {os.getpid()}" in str(refused.value)
                late = ExternalEvent("ask_user_response", {"tool_call_id": "q", "answer": "from elsewhere"})
                assert other.agent.emit_external_event(late, config=config) == []
                await other.run("elsewhere", config=AgentRunConfig("t"))  # other sessions are free
                reply = ExternalEvent("ask_user_response", {"tool_call_id": "q", "answer": "yes"})
                assert client.agent.emit_external_event(reply, config=config) == ["AskUserExtension"]
        await other.run("now mine", config=config)  # released when the request ended
    texts = [m.text for m in second.messages("s") if isinstance(m, UserMessage)]
    assert texts == ["start", "now mine"]


CHILD = textwrap.dedent(
    """
    import sys
    import trio
    from orchestrator import AgentExtension, AgentRunConfig, AssistantMessage, ScriptedModel, ToolCall, create_agent
    from orchestrator.extensions.ask_user import AskUserExtension
    from orchestrator.extensions.sqlite_store import SQLiteSessionStore

    class Ready(AgentExtension):
        async def on_event(self, context, event):
            if event.name == "ask_user":
                print("READY", flush=True)

    async def main() -> None:
        model = ScriptedModel([AssistantMessage("", [ToolCall("q", "ask_user", {"question": "Go?", "options": []})])])
        client = await create_agent(
            model, history=None, extensions=[SQLiteSessionStore(sys.argv[1]), AskUserExtension(), Ready()]
        )
        await client.run("hold it", config=AgentRunConfig("s"))

    trio.run(main)
    """
)


def test_a_live_process_holds_its_session_and_a_killed_one_releases_it_at_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, env=env, text=True)
    guard = threading.Timer(30, child.kill)
    guard.start()
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"

        async def run(text: str) -> AssistantMessage:
            client = await create_agent(
                ScriptedModel([AssistantMessage("mine")]), history=None, extensions=[SQLiteSessionStore(path)]
            )
            with trio.fail_after(10):
                return await client.run(text, config=AgentRunConfig("s"))

        with pytest.raises(SessionLocked, match=f"process {child.pid}"):
            trio.run(run, "while it lives")
        child.kill()
        assert child.wait() < 0
        assert trio.run(run, "after the kill").content == "mine"  # taken over at once, no timeout
    finally:
        guard.cancel()
        child.kill()
    stored = SQLiteSessionStore(path).messages("s")
    assert [m.text for m in stored if isinstance(m, UserMessage)] == ["hold it", "after the kill"]
    assert problems(stored) == []


# migration ----------------------------------------------------------------------------------


def test_a_database_written_by_the_first_schema_opens_migrated_and_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    shutil.copy(V1_DB, path)
    store = SQLiteSessionStore(path)
    assert store.store.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
    assert store.sessions() == ["done", "planning", "waiting"]
    assert [m.role for m in store.messages("done")] == ["user", "assistant", "tool", "assistant"]
    assert store.plan_mode("planning") == "plan_active"
    [pending] = store.pending_approvals("waiting")
    assert (pending.tool_call_id, pending.payload["options"]) == ("q1", ["yes", "no"])
    model = ScriptedModel([AssistantMessage("thanks")])

    async def answer_and_continue() -> None:
        client = await create_agent(model, history=None, extensions=[store, AskUserExtension()])
        reply = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "no"})
        assert client.agent.emit_external_event(reply, config=AgentRunConfig("waiting")) == ["SQLiteSessionStore"]
        with trio.fail_after(10):
            await client.run("next", config=AgentRunConfig("waiting"))

    trio.run(answer_and_continue)
    seen = list(model.requests[0].messages)
    assert problems(seen) == []
    assert ToolMessage("q1", "ask_user", "no") in seen
    store.close()
    assert SQLiteStore(path).schema_version() == SCHEMA_VERSION  # opening again migrates nothing


def test_a_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    db.close()
    with pytest.raises(SchemaTooNew, match=f"schema version {SCHEMA_VERSION + 1}"):
        SQLiteStore(path)


# the extension on another store -------------------------------------------------------------


async def test_the_extension_keeps_sessions_in_any_store() -> None:
    store = SessionStoreExtension(MemoryStore())
    model = ScriptedModel([asks(call("c1", "echo", text="hi")), AssistantMessage("said hi"), AssistantMessage("again")])
    client = await create_agent(model, tools=[echo], history=None, extensions=[store])
    with trio.fail_after(10):
        await client.run("say hi", config=AgentRunConfig("m"))
        await client.run("more", config=AgentRunConfig("m"))
    assert store.messages("m") == [*model.requests[2].messages, AssistantMessage("again")]

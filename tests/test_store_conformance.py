"""One conformance suite for every session store: memory, SQLite and PostgreSQL.

Each test runs on every store (PostgreSQL on a throwaway server, see tests/pg.py;
it skips, saying why, where there is none). Tests about durability and other
processes run on the stores that have them.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ImagePart,
    Message,
    ScriptedModel,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.session_store import SessionStoreExtension
from orchestrator.store import (
    MemoryStore,
    PendingApproval,
    SessionChange,
    SessionLocked,
    SessionStore,
    SQLiteStore,
    StoreError,
    Unreadable,
    decode_message,
    placeholder,
    problems,
)

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Backend:
    """A kind of store and the means to open it (again) on the same data."""

    name: str
    target: str
    opener: Callable[[], SessionStore]
    corrupt: Callable[[str, int, str], None]
    durable: bool
    opened: list[SessionStore] = field(default_factory=list)

    def open(self) -> SessionStore:
        store = self.opener()
        self.opened.append(store)
        return store


def _sqlite_corrupt(path: Path) -> Callable[[str, int, str], None]:
    def corrupt(session_id: str, row_id: int, body: str) -> None:
        db = sqlite3.connect(path)
        with db:
            db.execute("UPDATE messages SET body = ? WHERE rowid = ? AND session_id = ?", (body, row_id, session_id))
        db.close()

    return corrupt


def _postgres_corrupt(dsn: str) -> Callable[[str, int, str], None]:
    def corrupt(session_id: str, row_id: int, body: str) -> None:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(
                "UPDATE orchestrator_messages SET body = %s WHERE row_id = %s AND session_id = %s",
                (body, row_id, session_id),
            )

    return corrupt


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "memory":
        memory = MemoryStore()

        def corrupt(session_id: str, row_id: int, body: str) -> None:
            rows = memory._rows[session_id]
            memory._rows[session_id] = [
                type(r)(r.row_id, r.position, r.role, body) if r.row_id == row_id else r for r in rows
            ]

        chosen = Backend("memory", "", lambda: memory, corrupt, durable=False)
    elif request.param == "sqlite":
        path = tmp_path / "sessions.db"
        chosen = Backend("sqlite", str(path), lambda: SQLiteStore(path), _sqlite_corrupt(path), durable=True)
    else:
        dsn: str = request.getfixturevalue("postgres_dsn")
        from orchestrator.store.postgres import PostgresStore

        chosen = Backend("postgres", dsn, lambda: PostgresStore(dsn), _postgres_corrupt(dsn), durable=True)
    try:
        yield chosen
    finally:
        for store in chosen.opened:
            store.close()


def durable(backend: Backend) -> None:
    if not backend.durable:
        pytest.skip(f"the {backend.name} store keeps nothing beyond its object")


def messages(store: SessionStore, session_id: str) -> list[Message]:
    return [decode_message(row.body) for row in store.rows(session_id)]


def append(store: SessionStore, session_id: str, *items: Message, start: int = 0) -> None:
    store.apply(session_id, SessionChange(append=tuple((start + i, m) for i, m in enumerate(items))))


# messages ------------------------------------------------------------------------------


def test_messages_are_kept_in_order_of_position_per_session(backend: Backend) -> None:
    store = backend.open()
    store.apply("a", SessionChange(append=((1, AssistantMessage("second")), (0, UserMessage("first")))))
    append(store, "b", UserMessage("other"))
    append(store, "a", UserMessage("third"), start=5)
    assert messages(store, "a") == [UserMessage("first"), AssistantMessage("second"), UserMessage("third")]
    assert [row.position for row in store.rows("a")] == [0, 1, 5]
    assert [row.role for row in store.rows("a")] == ["user", "assistant", "user"]
    assert messages(store, "b") == [UserMessage("other")]
    assert store.rows("nobody") == []
    assert store.sessions() == ["a", "b"]


def test_a_taken_position_fails_the_whole_change_and_changes_nothing(backend: Backend) -> None:
    store = backend.open()
    append(store, "s", UserMessage("kept"))
    change = SessionChange(append=((1, AssistantMessage("new")), (0, UserMessage("clash"))), plan_mode="plan_active")
    with pytest.raises(StoreError):
        store.apply("s", change)
    assert messages(store, "s") == [UserMessage("kept")]
    assert store.plan_mode("s") == "normal"


def test_replace_makes_the_history_these_messages_from_position_zero(backend: Backend) -> None:
    store = backend.open()
    append(store, "s", UserMessage("a"), AssistantMessage("b"), UserMessage("c"))
    store.apply("s", SessionChange(replace=(UserMessage("summary"), AssistantMessage("tail"))))
    assert messages(store, "s") == [UserMessage("summary"), AssistantMessage("tail")]
    assert [row.position for row in store.rows("s")] == [0, 1]
    store.apply("s", SessionChange(replace=()))
    assert store.rows("s") == [] and "s" not in store.sessions()


def test_text_is_stored_as_valid_utf8_and_round_trips(backend: Backend) -> None:
    store = backend.open()
    call = ToolCall("c1", "look", {"path": "ünï/\ud83d\ude00", "n": [1, 2.5, None, True]})
    append(
        store,
        "s",
        UserMessage("lone \udc80 and \x00 nul"),
        AssistantMessage("żółw 🐢", [call]),
        ToolMessage("c1", "look", "ok", ToolStatus.FAILED),
    )
    assert messages(store, "s") == [
        UserMessage("lone \ufffd and \x00 nul"),
        AssistantMessage("żółw 🐢", [ToolCall("c1", "look", {"path": "ünï/😀", "n": [1, 2.5, None, True]})]),
        ToolMessage("c1", "look", "ok", ToolStatus.FAILED),
    ]


def test_a_tool_result_with_images_round_trips_and_a_text_row_written_before_parts_still_reads(
    backend: Backend,
) -> None:
    store = backend.open()
    image = ImagePart(data=b"\x89PNG\r\n\x1a\n\x00\xff", media_type="image/png")
    result = ToolMessage("c1", "shot", (TextPart("page:"), image, ImagePart(url="https://example.test/b.gif")))
    append(store, "s", AssistantMessage("", [ToolCall("c1", "shot", {})]), result)
    older = '{"role": "tool", "tool_call_id": "c0", "name": "shot", "content": "plain", "status": "failed"}'
    backend.corrupt("s", store.rows("s")[0].row_id, older)
    assert messages(store, "s") == [ToolMessage("c0", "shot", "plain", ToolStatus.FAILED), result]


def test_a_message_json_cannot_hold_is_refused_and_changes_nothing(backend: Backend) -> None:
    store = backend.open()
    circular: dict[str, Any] = {}
    circular["again"] = circular
    with pytest.raises(StoreError, match="cannot be stored"):
        append(store, "s", UserMessage("fine"), AssistantMessage("", [ToolCall("c", "t", circular)]))
    assert store.rows("s") == []


def test_an_unreadable_row_is_set_aside_and_reads_as_its_placeholder(backend: Backend) -> None:
    store = backend.open()
    append(store, "s", UserMessage("a"), UserMessage("b"))
    bad = store.rows("s")[1]
    backend.corrupt("s", bad.row_id, "{broken")
    assert store.rows("s")[1].body == "{broken"
    stand_in = placeholder(bad.row_id, "not JSON")
    store.apply("s", SessionChange(quarantine=(Unreadable(bad.row_id, "not JSON", stand_in),)))
    assert messages(store, "s") == [UserMessage("a"), stand_in]
    [kept] = store.quarantined("s")
    assert (kept.row_id, kept.session_id, kept.position, kept.body, kept.reason) == (
        bad.row_id,
        "s",
        bad.position,
        "{broken",
        "not JSON",
    )
    assert store.quarantined("other") == []


# approvals and modes ----------------------------------------------------------------------


def _wait(session_id: str, call_id: str, request_id: str = "r1", created: float = 1.0) -> PendingApproval:
    asked = {"tool_call_id": call_id, "question": "Go?", "options": ["yes"], "response_event": "ask_user_response"}
    return PendingApproval(session_id, request_id, call_id, "ask_user", "ask_user_response", asked, None, created)


def test_waits_are_listed_oldest_first_and_answered_once(backend: Backend) -> None:
    store = backend.open()
    store.record_wait(_wait("s", "q2", created=2.0))
    store.record_wait(_wait("s", "q1", created=1.0))
    store.record_wait(_wait("t", "q3", created=3.0))
    assert [w.tool_call_id for w in store.pending_approvals()] == ["q1", "q2", "q3"]
    assert [w.tool_call_id for w in store.pending_approvals("s")] == ["q1", "q2"]
    assert store.pending_approvals("s")[0] == _wait("s", "q1", created=1.0)
    assert not store.record_response("s", "q1", "enter_plan_mode_response", {"approved": True})  # another event
    assert not store.record_response("s", "nope", "ask_user_response", {"answer": "yes"})
    assert store.record_response("s", "q1", "ask_user_response", {"tool_call_id": "q1", "answer": "yes"})
    assert not store.record_response("s", "q1", "ask_user_response", {"tool_call_id": "q1", "answer": "no"})
    assert store.pending_approvals("s")[0].response == {"tool_call_id": "q1", "answer": "yes"}
    store.forget_request("s", "r1")  # an ended request's unanswered waits go; answered ones stay
    assert [w.tool_call_id for w in store.pending_approvals("s")] == ["q1"]
    store.record_wait(_wait("s", "q1", request_id="r2"))  # the same call waiting again starts unanswered
    assert store.pending_approvals("s")[0].response is None


def test_a_wait_keeps_the_fingerprint_of_its_agent_and_a_new_wait_replaces_it(backend: Backend) -> None:
    store = backend.open()
    store.record_wait(attrs.evolve(_wait("s", "q1"), fingerprint='{"digest": "a", "summary": {}}'))
    store.record_wait(_wait("s", "q2"))
    kept = {w.tool_call_id: w.fingerprint for w in store.pending_approvals("s")}
    assert kept == {"q1": '{"digest": "a", "summary": {}}', "q2": None}
    store.record_wait(attrs.evolve(_wait("s", "q1"), fingerprint='{"digest": "b", "summary": {}}'))
    kept = {w.tool_call_id: w.fingerprint for w in store.pending_approvals("s")}
    assert kept == {"q1": '{"digest": "b", "summary": {}}', "q2": None}


def test_a_result_or_a_drop_ends_a_wait(backend: Backend) -> None:
    store = backend.open()
    for call_id in ("q1", "q2", "q3"):
        store.record_wait(_wait("s", call_id))
    append(store, "s", ToolMessage("q1", "ask_user", "yes"))
    store.apply("s", SessionChange(drop_approvals=frozenset({"q3"})))
    assert [w.tool_call_id for w in store.pending_approvals("s")] == ["q2"]


def test_plan_mode_is_recorded_and_normal_clears_it(backend: Backend) -> None:
    store = backend.open()
    assert store.plan_mode("s") == "normal"
    store.apply("s", SessionChange(plan_mode="entry_awaiting_approval"))
    store.apply("s", SessionChange(plan_mode="plan_active"))
    assert (store.plan_mode("s"), store.plan_mode("t")) == ("plan_active", "normal")
    store.apply("s", SessionChange(plan_mode="normal"))
    assert store.plan_mode("s") == "normal"


# ownership ---------------------------------------------------------------------------------


def test_a_session_has_one_holder_at_a_time(backend: Backend) -> None:
    store = backend.open()
    held = store.lock_session("s")
    with pytest.raises(SessionLocked) as refused:
        store.lock_session("s")
    assert refused.value.session_id == "s"
    other = store.lock_session("t")  # other sessions are free
    if backend.durable:
        with pytest.raises(SessionLocked):
            backend.open().lock_session("s")  # another store object on the same data, as another process
    held.release()
    held.release()  # twice does nothing
    again = store.lock_session("s")
    again.release()
    other.release()


def test_a_closed_store_holds_nothing(backend: Backend) -> None:
    durable(backend)
    first = backend.open()
    first.lock_session("s")
    second = backend.open()
    with pytest.raises(SessionLocked):
        second.lock_session("s")
    first.close()
    second.lock_session("s").release()


HOLDER = textwrap.dedent(
    """
    import sys, time
    kind, target = sys.argv[1], sys.argv[2]
    if kind == "sqlite":
        from orchestrator.store import SQLiteStore as Store
    else:
        from orchestrator.store.postgres import PostgresStore as Store
    store = Store(target)
    store.lock_session("s")
    print("HELD", flush=True)
    time.sleep(600)
    """
)


def test_a_killed_holder_blocks_nothing(backend: Backend, tmp_path: Path) -> None:
    durable(backend)
    store = backend.open()
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(script), backend.name, backend.target], stdout=subprocess.PIPE, env=env, text=True
    )
    guard = threading.Timer(60, child.kill)
    guard.start()
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "HELD"
        with pytest.raises(SessionLocked):
            store.lock_session("s")
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
    finally:
        guard.cancel()
        child.kill()
        child.wait()
    deadline = time.monotonic() + 5  # the server notices the closed connection at once; allow a moment
    while True:
        try:
            store.lock_session("s").release()
            break
        except SessionLocked:
            assert time.monotonic() < deadline, "the killed process still holds the session"
            time.sleep(0.05)


def test_reopening_keeps_everything(backend: Backend) -> None:
    durable(backend)
    store = backend.open()
    append(store, "s", UserMessage("kept"))
    store.record_wait(_wait("s", "q1"))
    store.apply("s", SessionChange(plan_mode="plan_active"))
    store.close()
    again = backend.open()
    assert messages(again, "s") == [UserMessage("kept")]
    assert [w.tool_call_id for w in again.pending_approvals()] == ["q1"]
    assert again.plan_mode("s") == "plan_active"
    assert again.schema_version() >= 1  # type: ignore[attr-defined]


# through an agent -------------------------------------------------------------------------


@tool
def echo(text: str) -> str:
    """Echo.

    Args:
        text: the text
    """
    return text


def test_an_agent_keeps_its_sessions_and_restart_answers_in_every_store(backend: Backend) -> None:
    """What a process left when it stopped mid-question is answered, checked and continued in order."""
    question = ToolCall("q1", "ask_user", {"question": "Which?", "options": ["red", "blue"]})
    stopped = backend.open()
    append(stopped, "s", UserMessage("pick"), AssistantMessage("", [ToolCall("c1", "echo", {"text": "hi"}), question]))
    append(stopped, "s", ToolMessage("c1", "echo", "hi"), start=2)
    asked = {"tool_call_id": "q1", "question": "Which?", "options": ["red", "blue"], "response_event": "ask_user_response"}
    stopped.record_wait(PendingApproval("s", "r1", "q1", "ask_user", "ask_user_response", asked, None, 1.0))
    if backend.durable:
        stopped.close()
    model = ScriptedModel([AssistantMessage("blue it is"), AssistantMessage("again")])

    async def scenario() -> None:
        store = SessionStoreExtension(backend.open())
        client = await create_agent(model, tools=[echo], history=None, extensions=[store, AskUserExtension()])
        config = AgentRunConfig("s")
        bad = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "green"})
        assert client.agent.emit_external_event(bad, config=config) == []
        good = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "blue"})
        assert client.agent.emit_external_event(good, config=config) == [store.name]
        with trio.fail_after(10):
            await client.run("go on", config=config)
            await client.run("more", config=config)

    trio.run(scenario)
    seen = list(model.requests[0].messages)
    assert problems(seen) == []
    assert seen[-3:] == [ToolMessage("c1", "echo", "hi"), ToolMessage("q1", "ask_user", "blue"), UserMessage("go on")]
    assert messages(backend.open(), "s") == [*model.requests[1].messages, AssistantMessage("again")]
    assert backend.open().pending_approvals() == []


def test_an_agent_reports_an_unreadable_row_once_in_every_store(backend: Backend) -> None:
    store = backend.open()
    append(store, "s", UserMessage("a"), AssistantMessage("", [ToolCall("c1", "echo", {"text": "x"})]))
    append(store, "s", ToolMessage("c1", "echo", "x"), AssistantMessage("b"), start=2)
    bad = store.rows("s")[2]
    backend.corrupt("s", bad.row_id, '{"role": "tool", "status": 7}')
    model = ScriptedModel([AssistantMessage("one"), AssistantMessage("two")])
    reported: list[Any] = []

    async def scenario() -> None:
        extension = SessionStoreExtension(store)
        client = await create_agent(model, tools=[echo], history=None, extensions=[extension])
        with trio.fail_after(10):
            for text in ("first", "second"):
                async for event in client.stream(text, config=AgentRunConfig("s")):
                    if event.name == "stored_message_unreadable":
                        reported.append(event.payload["row_id"])

    trio.run(scenario)
    assert reported == [bad.row_id]
    for request in model.requests:
        assert problems(list(request.messages)) == []
    assert placeholder(bad.row_id, "'status' must be a str, got int") in model.requests[0].messages
    assert [q.row_id for q in store.quarantined("s")] == [bad.row_id]


# deletion ---------------------------------------------------------------------------------


def rows_holding(backend: Backend, store: SessionStore, text: str) -> list[str]:
    """Every row, in any table of the store, with a value that holds ``text``: ``table: row``."""
    if backend.name == "memory":
        return [repr(vars(store))] if text in repr(vars(store)) else []
    if backend.name == "sqlite":
        db = sqlite3.connect(backend.target)
        try:
            tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            found = [f"{t}: {row}" for t in tables for row in db.execute(f"SELECT * FROM {t}") if text in repr(row)]
        finally:
            db.close()
        return found
    import psycopg

    with psycopg.connect(backend.target, autocommit=True) as db:
        tables = [
            name
            for (name,) in db.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            ).fetchall()
        ]
        rows = [(t, row) for t in tables for row in db.execute(f"SELECT * FROM {t}").fetchall()]
        return [f"{t}: {row}" for t, row in rows if text in repr(row)]


def test_deleting_a_session_leaves_no_row_holding_its_id_and_keeps_the_others(backend: Backend) -> None:
    store = backend.open()
    for session_id in ("gone-7f3a", "kept"):
        append(store, session_id, UserMessage("a"), UserMessage("b"))
        store.record_wait(_wait(session_id, "q1"))
        store.record_wait(_wait(session_id, "q2"))
        store.record_response(session_id, "q2", "ask_user_response", {"tool_call_id": "q2", "answer": "yes"})
        store.apply(session_id, SessionChange(plan_mode="plan_active"))
        bad = store.rows(session_id)[1]
        backend.corrupt(session_id, bad.row_id, "{broken")
        stand_in = placeholder(bad.row_id, "not JSON")
        store.apply(session_id, SessionChange(quarantine=(Unreadable(bad.row_id, "not JSON", stand_in),)))
    assert rows_holding(backend, store, "gone-7f3a")
    lock = store.lock_session("gone-7f3a")
    try:
        assert store.delete_session("gone-7f3a") is True
    finally:
        lock.release()
    assert rows_holding(backend, store, "gone-7f3a") == []
    assert store.delete_session("gone-7f3a") is False
    assert store.sessions() == ["kept"] and len(store.pending_approvals("kept")) == 2
    assert store.plan_mode("kept") == "plan_active" and len(store.quarantined("kept")) == 1

"""A parked run resumed by a changed agent (a deploy removed a tool, changed a policy) follows the agent's
``on_agent_changed`` policy, and a call of a tool that is gone fails saying so: on the run store with a worker,
and on the one-process session store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator import AgentRunConfig, AssistantMessage, ToolMessage, UserMessage
from orchestrator.cluster.worker import Worker
from orchestrator.config import ExternalEvent
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.runtime.fingerprint import AgentChanged, AgentFingerprint
from orchestrator.store.runs import NewInboxItem
from orchestrator.store.runs_sql import RUN_SCHEMA_VERSION, SQLRunStore, sqlite_run_store
from orchestrator.wire.format import encode_message
from tests.reliability.agent_change_apps import LEDGER, refund
from tests.reliability.agent_change_apps import agent as _agent

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture(autouse=True)
def _ledger() -> None:
    LEDGER.clear()


# the run store, with a worker -------------------------------------------------------------------------------------


async def _carry(store: SQLRunStore, client: Any, until: Callable[[str], bool]) -> None:
    worker = Worker(client, store, name="w", poll_seconds=0.05)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while True:
                row = store.run("r1")
                assert row is not None
                if until(row.status):
                    break
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()


async def _parked_run(tmp_path: Path, store: SQLRunStore | None = None) -> tuple[SQLRunStore, AgentFingerprint]:
    """A run started by the first agent, parked on the approval of ``charge``, then approved."""
    store = store or sqlite_run_store(str(tmp_path / "runs.db"))
    store.create_run("s1", "r1", encode_message(UserMessage("charge 5 dollars")))
    first = await _agent()
    await _carry(store, first, lambda status: status == "parked")
    row = store.run("r1")
    assert row is not None and row.fingerprint == first.agent.fingerprint.text()
    approval = {"tool_call_id": "c1", "approved": True}
    store.post(NewInboxItem("s1", "r1", "tool_approval_response", approval))
    return store, first.agent.fingerprint


def _events(store: SQLRunStore) -> list[dict[str, Any]]:
    return [dict(event.body) for event in store.events("r1", limit=10_000)]


def _one(events: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [event for event in events if event["type"] == kind]
    assert len(found) == 1, [event["type"] for event in events]
    return found[0]


async def test_a_worker_resumes_a_run_whose_tool_was_removed_with_a_failed_result_and_a_warning(
    tmp_path: Path,
) -> None:
    store, started_by = await _parked_run(tmp_path)
    second = await _agent(tools=(refund,))
    await _carry(store, second, lambda status: status in ("completed", "failed"))
    row = store.run("r1")
    assert row is not None and row.status == "completed"
    events = _events(store)
    changed = _one(events, "agent_changed")
    assert changed["tools_removed"] == ["charge"] and changed["tools_added"] == []
    assert changed["policy"] == "warn" and changed["outcome"] == "continued"
    assert changed["stored_digest"] == started_by.digest
    failed = _one(events, "tool_failed")
    assert "'charge' is no longer available" in failed["result"]["content"]
    assert events[-1]["type"] == "run_completed"
    assert LEDGER == []  # the approved call never ran: its tool is gone
    history = store.history("s1")
    assert isinstance(history[-1], AssistantMessage) and "no longer available" in history[-1].content
    # The run goes on under the second agent: later resumes compare with it.
    assert row.fingerprint == second.agent.fingerprint.text()


async def test_a_worker_on_postgresql_keeps_the_fingerprint_and_warns_alike(tmp_path: Path, postgres_dsn: str) -> None:
    from orchestrator.store.runs_sql import postgres_run_store

    store, started_by = await _parked_run(tmp_path, postgres_run_store(postgres_dsn))
    try:
        second = await _agent(tools=(refund,))
        await _carry(store, second, lambda status: status in ("completed", "failed"))
        changed = _one(_events(store), "agent_changed")
        assert changed["tools_removed"] == ["charge"] and changed["stored_digest"] == started_by.digest
        row = store.run("r1")
        assert row is not None and row.status == "completed"
        assert row.fingerprint == second.agent.fingerprint.text() and LEDGER == []
    finally:
        store.close()


async def test_a_worker_resumes_a_run_whose_approval_policy_changed_naming_the_extension(tmp_path: Path) -> None:
    store, _ = await _parked_run(tmp_path)
    second = await _agent(policy="allow")
    await _carry(store, second, lambda status: status in ("completed", "failed"))
    events = _events(store)
    changed = _one(events, "agent_changed")
    assert changed["extensions_changed"] == ["ToolApprovalExtension"]
    assert changed["tools_removed"] == [] and changed["tools_changed"] == [] and changed["model_before"] is None
    assert events[-1]["type"] == "run_completed"
    assert LEDGER == ["charge 500"]  # the call was approved and the tool is there: it ran once


async def test_refuse_ends_the_resumed_run_failed_with_both_fingerprints(tmp_path: Path) -> None:
    store, started_by = await _parked_run(tmp_path)
    second = await _agent(tools=(refund,), on_agent_changed="refuse")
    await _carry(store, second, lambda status: status in ("completed", "failed"))
    row = store.run("r1")
    assert row is not None and row.status == "failed"
    events = _events(store)
    changed = _one(events, "agent_changed")
    assert changed["outcome"] == "refused" and changed["policy"] == "refuse"
    failed = events[-1]
    assert failed["type"] == "run_failed" and failed["error"]["type"] == "AgentChanged"
    assert "tools removed: charge" in failed["error"]["message"]
    assert started_by.digest[:12] in failed["error"]["message"]
    assert second.agent.fingerprint.digest[:12] in failed["error"]["message"]
    assert LEDGER == []
    assert row.fingerprint == started_by.text()  # the refused agent never took the run over
    result = store.history("s1")[-1]
    assert isinstance(result, ToolMessage) and result.tool_call_id == "c1" and result.status.value == "cancelled"


async def test_a_migration_hook_sees_both_fingerprints_and_decides(tmp_path: Path) -> None:
    seen: list[tuple[str, str, str]] = []

    async def migrate(stored: AgentFingerprint, current: AgentFingerprint, context: Any) -> bool:
        seen.append((stored.digest, current.digest, context.request_id))
        return "charge" in current.tools  # a run may go on only where its tools are still there

    store, started_by = await _parked_run(tmp_path)
    second = await _agent(policy="allow", on_agent_changed=migrate)
    await _carry(store, second, lambda status: status in ("completed", "failed"))
    assert seen == [(started_by.digest, second.agent.fingerprint.digest, "r1")]
    events = _events(store)
    assert _one(events, "agent_changed")["policy"] == "hook"
    assert events[-1]["type"] == "run_completed"
    assert LEDGER == ["charge 500"]


async def test_a_migration_hook_that_raises_refuses_with_its_reason(tmp_path: Path) -> None:
    def migrate(stored: AgentFingerprint, current: AgentFingerprint, context: Any) -> None:
        raise RuntimeError("charge was retired; cancel the order instead")

    store, _ = await _parked_run(tmp_path)
    second = await _agent(tools=(refund,), on_agent_changed=migrate)
    await _carry(store, second, lambda status: status in ("completed", "failed"))
    events = _events(store)
    reason = _one(events, "agent_changed")["reason"]
    assert reason.endswith("RuntimeError: charge was retired; cancel the order instead")
    assert events[-1]["type"] == "run_failed" and events[-1]["error"]["type"] == "AgentChanged"


async def test_the_same_agent_resumes_without_a_change_event(tmp_path: Path) -> None:
    store, _ = await _parked_run(tmp_path)
    await _carry(store, await _agent(), lambda status: status in ("completed", "failed"))
    events = _events(store)
    assert not [event for event in events if event["type"] == "agent_changed"]
    assert events[-1]["type"] == "run_completed" and LEDGER == ["charge 500"]


# the one-process session store ------------------------------------------------------------------------------------


async def _parked_session(tmp_path: Path) -> tuple[Path, AgentFingerprint]:
    """A request waiting on the approval of ``charge`` when its process stopped; the approval recorded since."""
    path = tmp_path / "sessions.db"
    stopped = subprocess.run(
        [sys.executable, "-m", "tests.reliability.agent_change_apps", "park", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert stopped.stdout == "waiting\n", stopped.stderr
    first = await _agent()
    waits = SQLiteSessionStore(path).pending_approvals("s1")
    assert [json.loads(w.fingerprint or "{}").get("digest") for w in waits] == [first.agent.fingerprint.digest]
    later = await _agent(extensions=(SQLiteSessionStore(path),), history=None)
    answer = ExternalEvent("tool_approval_response", {"tool_call_id": "c1", "approved": True})
    assert later.agent.deliver(answer, config=AgentRunConfig(session_id="s1")).accepted
    return path, first.agent.fingerprint


async def _next_request(client: Any) -> tuple[list[Any], BaseException | None]:
    events: list[Any] = []
    try:
        async for event in client.stream("and now?", config=AgentRunConfig(session_id="s1", request_id="r2")):
            events.append(event)
    except Exception as error:
        return events, error
    return events, None


async def test_the_session_store_resumes_a_call_whose_tool_was_removed_with_a_warning(tmp_path: Path) -> None:
    path, started_by = await _parked_session(tmp_path)
    store = SQLiteSessionStore(path)
    second = await _agent(tools=(refund,), extensions=(store,), history=None)
    events, error = await _next_request(second)
    assert error is None
    changed = [event for event in events if event.name == "agent_changed"]
    assert len(changed) == 1 and changed[0].payload["tools_removed"] == ("charge",)
    assert changed[0].payload["stored_digest"] == started_by.digest
    assert events[-1].name == "run_completed"
    result = next(m for m in store.messages("s1") if isinstance(m, ToolMessage))
    assert result.status.value == "failed" and "'charge' is no longer available" in result.text
    assert LEDGER == []
    assert store.pending_approvals("s1") == []


async def test_the_session_store_names_a_changed_approval_policy(tmp_path: Path) -> None:
    path, _ = await _parked_session(tmp_path)
    second = await _agent(policy="allow", extensions=(SQLiteSessionStore(path),), history=None)
    events, error = await _next_request(second)
    assert error is None
    changed = [event for event in events if event.name == "agent_changed"]
    assert len(changed) == 1 and changed[0].payload["extensions_changed"] == ("ToolApprovalExtension",)
    assert events[-1].name == "run_completed"


async def test_the_session_store_refuses_with_a_typed_error_and_mends_the_session(tmp_path: Path) -> None:
    path, started_by = await _parked_session(tmp_path)
    store = SQLiteSessionStore(path)
    second = await _agent(tools=(refund,), extensions=(store,), history=None, on_agent_changed="refuse")
    events, error = await _next_request(second)
    assert isinstance(error, AgentChanged)
    assert error.stored == started_by and error.current == second.agent.fingerprint
    assert error.change.tools_removed == ("charge",)
    assert [event.name for event in events][-1] == "run_failed"
    assert [event.payload["outcome"] for event in events if event.name == "agent_changed"] == ["refused"]
    result = next(m for m in store.messages("s1") if isinstance(m, ToolMessage))
    assert result.status.value == "cancelled"  # the wait ended unused, as a stopped process leaves it
    assert store.pending_approvals("s1") == []
    events, error = await _next_request(second)  # the session goes on
    assert error is None and events[-1].name == "run_completed"


async def test_the_session_store_asks_a_migration_hook(tmp_path: Path) -> None:
    path, started_by = await _parked_session(tmp_path)
    seen: list[str] = []

    def migrate(stored: AgentFingerprint, current: AgentFingerprint, context: Any) -> bool:
        seen.append(stored.digest)
        return False

    store = SQLiteSessionStore(path)
    second = await _agent(policy="allow", extensions=(store,), history=None, on_agent_changed=migrate)
    _, error = await _next_request(second)
    assert seen == [started_by.digest]
    assert isinstance(error, AgentChanged) and error.reason == "the migration hook returned False"


async def test_a_run_store_of_version_2_gets_the_column_and_its_runs_are_resumed_without_a_check(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "runs.db")
    store, _ = await _parked_run(tmp_path)
    store.close()
    old = sqlite3.connect(path)
    with old:
        old.execute("DROP INDEX orchestrator_runs_wake")
        for column in ("fingerprint", "wake_at", "trace_context", "settings", "owner"):
            old.execute(f"ALTER TABLE orchestrator_runs DROP COLUMN {column}")
        old.execute("UPDATE orchestrator_run_schema SET version = 2")
    old.close()
    store = sqlite_run_store(path)
    assert store.schema_version() == RUN_SCHEMA_VERSION == 3
    row = store.run("r1")
    assert row is not None and row.fingerprint is None
    second = await _agent(tools=(refund,), on_agent_changed="refuse")  # nothing stored: nothing to refuse
    await _carry(store, second, lambda status: status in ("completed", "failed"))
    row = store.run("r1")
    assert row is not None and row.status == "completed"
    assert row.fingerprint == second.agent.fingerprint.text()  # the first commit stores the carrying agent's
    assert not [event for event in _events(store) if event["type"] == "agent_changed"]

"""Compaction of a run kept in a run store: the worker's commit replaces the stored history, fenced by the lease,
and a run resumed afterwards (parked, or the next request of the session) reads the compacted history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolCall, UserMessage, create_agent, tool
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.config import ExternalEvent
from orchestrator.extensions.compaction import SUMMARY_PREFIX, CompactionExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.server.backend import RunStart
from orchestrator.store.runs_sql import sqlite_run_store

SEEN: list[list[str]] = []  # what each model request held, as role:text


@tool
async def note(text: str) -> str:
    """Write a note.

    Args:
        text: what to write
    """
    return f"noted {text}"


def step(request: ModelRequest) -> AssistantMessage:
    SEEN.append([f"{m.role}:{getattr(m, 'text', '') or m.content}"[:60] for m in request.messages])
    last = request.messages[-1]
    if last.role == "user" and "note" in last.text:
        return AssistantMessage("", (ToolCall(f"c{len(SEEN)}", "note", {"text": last.text}),))
    return AssistantMessage("done " + ("x" * 200))


async def agent() -> Any:
    compaction = CompactionExtension(
        ScriptedModel([AssistantMessage("short summary")], repeat_last=True), threshold_tokens=60, keep_last=2, auto=True
    )
    return await create_agent(
        ScriptedModel([step], repeat_last=True),
        tools=[note],
        extensions=[ToolApprovalExtension({"note": "ask"}), compaction],
    )


async def test_a_stored_run_compacts_its_history_and_a_resumed_run_reads_the_compacted_one(tmp_path: Path) -> None:
    SEEN.clear()
    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(Worker(await agent(), sqlite_run_store(path), name="w", poll_seconds=0.05).run)
            for index in range(3):  # three requests grow the history past the threshold
                request_id = await web.start(RunStart("s1", UserMessage(f"hello {index} " + "y" * 200)))
                await _until_done(web, request_id)
            request_id = await web.start(RunStart("s1", UserMessage("please note this")))
            while not (pending := await web.pending("s1")):
                await trio.sleep(0.05)
            parked_history = store.history("s1")
            assert any(m.role == "user" and m.text.startswith(SUMMARY_PREFIX) for m in parked_history)
            delivery = await web.deliver(
                "s1", None, ExternalEvent("tool_approval_response", {"tool_call_id": pending[0]["tool_call_id"], "approved": True}), None
            )
            assert delivery
            await _until_done(web, request_id)
            nursery.cancel_scope.cancel()
    history = store.history("s1")
    summaries = [m for m in history if m.role == "user" and m.text.startswith(SUMMARY_PREFIX)]
    assert summaries, [m.role for m in history]
    assert not any(m.role == "user" and m.text.startswith("hello 0") for m in history)  # replaced by the summary
    # The run resumed after parking sent the model the compacted history, not the original one.
    assert SEEN[-1][0].startswith("user:" + SUMMARY_PREFIX[:20]) or any(
        line.startswith("user:" + SUMMARY_PREFIX[:20]) for line in SEEN[-1]
    ), SEEN[-1]
    assert not any(line.startswith("user:hello 0") for line in SEEN[-1])
    positions = [row for row in _positions(path)]
    assert positions == list(range(len(history)))


async def _until_done(web: StoreBackend, request_id: str) -> None:
    while not (await web.run(request_id)).done:
        await trio.sleep(0.05)


def _positions(path: str) -> list[int]:
    import sqlite3

    with sqlite3.connect(path) as db:
        return [row[0] for row in db.execute("SELECT position FROM messages WHERE session_id = 's1' ORDER BY position")]

"""A run resumed from the store waits again for its question without asking it again: the log has it once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.store.runs_sql import sqlite_run_store
from tests.cluster import apps
from tests.server.support import read_sse, serving


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")


async def test_a_parked_question_answered_later_is_in_the_log_once(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    store = sqlite_run_store(path)
    worker = Worker(await apps.approval_agent(), sqlite_run_store(path), name="w", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=10) as http:
            await nursery.start(worker.run)
            async with serving(StoreBackend(sqlite_run_store(path), poll_seconds=0.02)) as base:  # type: ignore[arg-type]
                started = await http.post(f"{base}/sessions/s1/runs", json={"input": "paint"})
                request_id = started.json()["request_id"]

                async def answer(event: dict[str, Any]) -> None:
                    if event["type"] == "run_parked":  # the worker let the run go: the answer resumes it
                        payload = {"tool_call_id": event["waiting"][0], "answer": "yes"}
                        reply = await http.post(
                            f"{base}/sessions/s1/events", json={"name": "ask_user_response", "payload": payload}
                        )
                        assert reply.status_code == 202, reply.text

                got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=answer)
            nursery.cancel_scope.cancel()
    assert got.types[-1] == "run_completed", got.types
    assert "run_resumed" in got.types
    questions = [e for e in got.events if e["type"] == "ask_user"]
    assert len(questions) == 1, [e["seq"] for e in questions]
    logged = [e for e in store.events(request_id) if e.type == "ask_user"]
    assert len(logged) == 1
    seqs = [e["seq"] for e in got.events]
    assert seqs == list(range(1, len(seqs) + 1))  # nothing was skipped in its place

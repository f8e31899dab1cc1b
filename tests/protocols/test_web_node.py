"""The protocols on a cluster's web node, with a worker carrying the runs over a SQLite run store: the run parks
on its question, and the answer that the protocol's own client sends comes back through the store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.store.runs_sql import sqlite_run_store
from tests.cluster import apps
from tests.protocols.agui_support import agui_events, run_input
from tests.protocols.node_clients import run_client
from tests.server.support import serving

assert_valid_agui = pytest.importorskip(
    "ag_ui_validate.pytest_plugin", reason="ag-ui-validate is not installed (pip install -e '.[test]')"
).assert_valid_agui


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")


@asynccontextmanager
async def web_node(tmp_path: Path) -> AsyncIterator[str]:
    """A web node and one worker over a SQLite run store; yields the web node's base URL."""
    path = str(tmp_path / "cluster.db")
    worker = Worker(await apps.approval_agent(), sqlite_run_store(path), name="w", poll_seconds=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        async with serving(StoreBackend(sqlite_run_store(path), poll_seconds=0.02)) as base:  # type: ignore[arg-type]
            yield base
        nursery.cancel_scope.cancel()


async def test_an_agui_run_parks_on_its_question_and_the_resume_run_completes_it(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with web_node(tmp_path) as base, httpx.AsyncClient(timeout=20) as http:
            first = await agui_events(http, base, run_input("w1", "paint"))
            assert_valid_agui(first)
            [asked] = first[-1]["outcome"]["interrupts"]
            assert asked["message"] == "Go on with paint?"
            bad = [{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "maybe"}}]
            refused = await agui_events(http, base, run_input("w1", resume=bad))
            assert refused[-1]["type"] == "RUN_ERROR" and refused[-1]["code"] == "AnswerRefused"
            good = [{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "yes"}}]
            second = await agui_events(http, base, run_input("w1", resume=good))
            assert_valid_agui(second)
            assert second[-1]["result"] == "Done with paint: yes."


async def test_the_agui_client_answers_a_question_on_a_web_node(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with web_node(tmp_path) as base:
            got = await run_client("@ag-ui/client", "agui_cycle.mjs", base, "ask", "w2", "yes")
    assert got["result"] == "Done with go: yes." and got["pending"] == []


async def test_the_ai_sdk_chat_answers_a_question_on_a_web_node(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with web_node(tmp_path) as base:
            got = await run_client("ai", "ai_chat_cycle.mjs", base, "ask", "w3", "yes")
    assert got["errors"] == [] and got["status"] == "ready"
    text = "".join(p["text"] for p in got["messages"][-1]["parts"] if p["type"] == "text")
    assert text.endswith("Done with go: yes.")

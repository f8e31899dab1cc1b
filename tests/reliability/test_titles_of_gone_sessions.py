"""A session deleted over HTTP, or pruned as idle, takes its title with it: the titles file beside the SQLite
store no longer names it (it kept the title, and so the session's id, after the session was gone)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import trio

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.config import AgentRunConfig
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.server.backend import LocalBackend
from orchestrator.store.retention import Retention
from tests.server.support import serving


def titles(path: Path) -> dict[str, str]:
    found: dict[str, str] = json.loads(Path(str(path) + ".titles.json").read_text())
    return found


async def test_a_deleted_or_pruned_session_leaves_no_title_behind(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteSessionStore(path)
    client = await create_agent(
        ScriptedModel([AssistantMessage("hello")], repeat_last=True), history=None, extensions=[store]
    )
    backend = LocalBackend(client)
    with trio.fail_after(20):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            for session_id in ("deleted", "pruned", "kept"):
                await client.run("hi", config=AgentRunConfig(session_id))
                named = await http.put(f"{base}/sessions/{session_id}/title", json={"title": f"about {session_id}"})
                assert named.status_code == 200, named.text
            assert sorted(titles(path)) == ["deleted", "kept", "pruned"]
            assert (await http.delete(f"{base}/sessions/deleted")).status_code == 200
            assert sorted(titles(path)) == ["kept", "pruned"]
        report = await backend.prune(Retention(idle_sessions_after=3600), now=time.time() + 2 * 3600)
        assert report.sessions == ("kept", "pruned")
    store.close()
    assert titles(path) == {}

"""A resume run's MESSAGES_SNAPSHOT states the whole thread: every message of the session's earlier requests
and of the resumed one, each with the id the run that streamed it gave, in one process and on a web node
whose worker carries the runs over SQLite or PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.protocols.agui_support import agui_events, run_input, turn_asker_client, web_node
from tests.server.support import serving

assert_valid_agui = pytest.importorskip(
    "ag_ui_validate.pytest_plugin", reason="ag-ui-validate is not installed (pip install -e '.[test]')"
).assert_valid_agui


@asynccontextmanager
async def service(where: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    client = await turn_asker_client()
    if where == "process":
        async with serving(client) as base:
            yield base
        return
    target = str(tmp_path / "runs.db") if where == "sqlite" else request.getfixturevalue("postgres_dsn")
    async with web_node(client, target) as base:
        yield base


def streamed_ids(events: list[dict[str, Any]]) -> set[str]:
    """The message ids a run streamed (text, a tool call's message, a tool result)."""
    found = {e["messageId"] for e in events if e["type"] in ("TEXT_MESSAGE_START", "TOOL_CALL_RESULT")}
    return found | {e["parentMessageId"] for e in events if e["type"] == "TOOL_CALL_START"}


async def ask_and_answer(http: httpx.AsyncClient, base: str, thread: str, text: str) -> list[list[dict[str, Any]]]:
    first = await agui_events(http, base, run_input(thread, text))
    [asked] = first[-1]["outcome"]["interrupts"]
    resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "yes"}}]
    return [first, await agui_events(http, base, run_input(thread, resume=resume))]


@pytest.mark.parametrize("where", ["process", "sqlite", "postgres"])
async def test_a_resume_runs_snapshot_holds_every_message_of_the_thread_with_the_ids_it_was_streamed_with(
    where: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with trio.fail_after(60):
        async with service(where, request, tmp_path) as base, httpx.AsyncClient(timeout=20) as http:
            paint = await ask_and_answer(http, base, "th", "paint")
            draw = await ask_and_answer(http, base, "th", "draw")
    for run in (*paint, *draw):
        assert_valid_agui(run)
    assert paint[1][-1]["result"] == "Done with paint: yes." and draw[1][-1]["result"] == "Done with draw: yes."
    snapshot = next(e for e in draw[1] if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    assert [(m["role"], m["content"]) for m in snapshot] == [
        ("user", "paint"),
        ("assistant", ""),
        ("tool", "yes"),
        ("assistant", "Done with paint: yes."),
        ("user", "draw"),
        ("assistant", ""),
    ]
    ids = [m["id"] for m in snapshot]
    assert len(set(ids)) == len(ids)
    # the first request's messages keep the ids its own runs gave them (streamed, and in its resume's snapshot)
    earlier = next(e for e in paint[1] if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    assert ids[:2] == [m["id"] for m in earlier]
    assert set(ids[:4]) == {m["id"] for m in earlier} | streamed_ids(paint[0]) | streamed_ids(paint[1])
    assert set(ids[4:]) >= streamed_ids(draw[0]) and len(ids[4:]) == 2
    assert snapshot[5]["toolCalls"][0]["function"]["name"] == "ask_user"


async def test_a_message_whose_requests_log_is_no_longer_kept_still_is_in_the_snapshot_by_its_position() -> None:
    async with serving(await turn_asker_client(), retained_runs=1) as base, httpx.AsyncClient(timeout=20) as http:
        paint = await ask_and_answer(http, base, "kept", "paint")
        await ask_and_answer(http, base, "kept", "draw")  # the paint request's run (and log) is let go
        first = await agui_events(http, base, run_input("kept", "sing"))
        [asked] = first[-1]["outcome"]["interrupts"]
        resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "no"}}]
        last = await agui_events(http, base, run_input("kept", resume=resume))
    assert_valid_agui(last)
    snapshot = next(e for e in last if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    assert [m["content"] for m in snapshot if m["role"] == "user"] == ["paint", "draw", "sing"]
    ids = [m["id"] for m in snapshot]
    assert ids[:4] == ["kept.h0", "kept.h1", "kept.h2", "kept.h3"]  # no log holds them: their history positions
    assert not set(ids[:4]) & streamed_ids(paint[1])
    assert len(set(ids)) == len(ids) == 10
    assert last[-1]["result"] == "Done with sing: no."

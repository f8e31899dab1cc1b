"""A redaction hook changes events and messages before they are stored or sent: a card number a tool returns
and the model repeats never reaches the SSE stream, the stored history rows, nor the run event log, in one
process and on a web node; the model itself saw it (the hook cannot undo that)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.config import AgentRunConfig
from orchestrator.events import AgentEvent, TextDeltaEvent
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.runtime.redaction import RedactedKind, mask, rewrite_strings
from orchestrator.store.runs_sql import sqlite_run_store
from tests.server.support import read_sse, serving
from tests.support import asks, call

CARD = r"\b\d{4}(?:[ -]?\d{4}){3}\b"
SECRET = "1111"  # in every form of the number the tool and the model give


@tool
async def card_on_file(customer: str) -> str:
    """The payment card a customer has on file.

    Args:
        customer: who
    """
    return f"{customer} pays with 4111 1111 1111 1111"


def step(request: ModelRequest) -> AssistantMessage:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        return AssistantMessage("Your card is 4111111111111111, thanks.")
    return asks(call("c1", "card_on_file", customer="ada"), text="Looking.")


def rows_holding(path: Path | str, text: str) -> list[str]:
    db = sqlite3.connect(path)
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [f"{t}: {row}" for t in tables for row in db.execute(f"SELECT * FROM {t}") if text in repr(row)]
    finally:
        db.close()


def test_mask_rewrites_every_string_of_an_event_or_message_and_keeps_what_it_does_not_change() -> None:
    redact = mask(CARD, "[card]")
    message = ToolMessage("c1", "card_on_file", "ada pays with 4111-1111-1111-1111")
    assert redact(message).content == "ada pays with [card]"
    untouched = ToolMessage("c1", "card_on_file", "nothing here")
    assert redact(untouched) is untouched
    nested = {"a": ["x 4111111111111111", ("y",)], "b": 3}
    assert rewrite_strings(nested, lambda text: text.upper()) == {"a": ["X 4111111111111111", ("Y",)], "b": 3}


async def test_a_redactor_returning_another_kind_fails_the_request_with_a_clear_error() -> None:
    def wrong(value: Any) -> Any:
        return "nope" if isinstance(value, AgentEvent) else value

    client = await create_agent(ScriptedModel([AssistantMessage("hi")]), redact=wrong)
    handle = await client.start("hello")
    with pytest.raises(RedactedKind, match="redact must return an AgentEvent for an AgentEvent, got str"):
        await handle.result()
    with pytest.raises(TypeError, match=r"Agent\.redact"):
        await create_agent(ScriptedModel([]), redact="mask")  # type: ignore[arg-type]


async def test_one_process_never_sends_nor_stores_the_masked_value(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteSessionStore(path)
    model = ScriptedModel([step], repeat_last=True)
    client = await create_agent(
        model, tools=[card_on_file], history=None, extensions=[store], redact=mask(CARD, "[card]")
    )
    with trio.fail_after(20):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            started = await http.post(f"{base}/sessions/s1/runs", json={"input": "which card?"})
            request_id = started.json()["request_id"]
            got = await read_sse(http, f"{base}/runs/{request_id}/events")
            session = (await http.get(f"{base}/sessions/s1")).text
    store.close()
    raw = "".join(str(event) for event in got.events)
    assert got.types[-1] == "run_completed"
    assert SECRET not in raw and SECRET not in session
    assert "ada pays with [card]" in raw and "Your card is [card], thanks." in raw
    deltas = [e["text"] for e in got.events if e["type"] == "text_delta"]
    assert " [card]," in deltas
    assert rows_holding(path, SECRET) == [] and rows_holding(path, "[card]")
    # What the model saw within the request is the tool's own result: redaction cannot undo that.
    assert any(SECRET in str(message) for message in model.requests[1].messages)


async def test_a_client_stream_gets_redacted_events_too() -> None:
    client = await create_agent(
        ScriptedModel([step], repeat_last=True), tools=[card_on_file], redact=mask(CARD, "[card]")
    )
    seen = [event async for event in client.stream("which card?", config=AgentRunConfig("s1"))]
    assert SECRET not in "".join(map(str, seen))
    assert any(isinstance(e, TextDeltaEvent) and e.text == " [card]," for e in seen)
    assert SECRET not in str(await client.history("s1"))


async def test_a_web_node_never_sends_nor_stores_what_its_workers_redact(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    web_store, work_store = sqlite_run_store(path), sqlite_run_store(path)
    agent = await create_agent(
        ScriptedModel([step], repeat_last=True), tools=[card_on_file], redact=mask(CARD, "[card]")
    )
    worker = Worker(agent, work_store, name="w", poll_seconds=0.05)
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=10) as http:
                await nursery.start(worker.run)
                async with serving(StoreBackend(web_store, poll_seconds=0.02)) as base:  # type: ignore[arg-type]
                    started = await http.post(f"{base}/sessions/s1/runs", json={"input": "which card?"})
                    request_id = started.json()["request_id"]
                    got = await read_sse(http, f"{base}/runs/{request_id}/events")
                    session = (await http.get(f"{base}/sessions/s1")).text
                nursery.cancel_scope.cancel()
    finally:
        web_store.close()
        work_store.close()
    raw = "".join(str(event) for event in got.events)
    assert got.types[-1] == "run_completed"
    assert SECRET not in raw and SECRET not in session
    assert "ada pays with [card]" in raw and "Your card is [card], thanks." in raw
    assert rows_holding(path, SECRET) == []
    assert [row for row in rows_holding(path, "[card]") if row.startswith("orchestrator_run_events")]
    assert [row for row in rows_holding(path, "[card]") if row.startswith("messages")]

"""POST /sessions/{id}/fork and PUT /sessions/{id}/title on both hosts, over a real socket."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import trio

from orchestrator import AgentClient, AssistantMessage, ScriptedModel, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from tests.server.support import Serving, read_sse
from tests.server.test_http import start
from tests.support import asks, call


async def _two_turns(http: httpx.AsyncClient, base: str) -> None:
    for text in ("first question", "second question"):
        request_id = await start(http, base, "s1", text)
        got = await read_sse(http, f"{base}/runs/{request_id}/events")
        assert got.types[-1] == "run_completed"


def _texts(session: dict[str, object]) -> list[str]:
    messages = session["messages"]
    assert isinstance(messages, list)
    return [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in messages]


async def _client(store: SQLiteSessionStore | None = None) -> AgentClient:
    model = ScriptedModel([AssistantMessage("answer one"), AssistantMessage("answer two")])
    if store is None:
        return await create_agent(model)
    return await create_agent(model, history=None, extensions=[store])


async def test_a_session_is_forked_whole_or_from_an_earlier_turn(serving: Serving) -> None:
    client = await _client()
    with trio.fail_after(30):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            await _two_turns(http, base)
            whole = await http.post(f"{base}/sessions/s1/fork", json={"session_id": "copy"})
            assert whole.status_code == 201, whole.text
            assert whole.json() == {"session_id": "copy", "forked_from": "s1", "messages": 4}
            early = await http.post(f"{base}/sessions/s1/fork", json={"turn": 1})
            assert early.status_code == 201, early.text
            new = early.json()["session_id"]
            assert new.startswith("s1-fork-") and early.json()["messages"] == 2
            shown = (await http.get(f"{base}/sessions/{new}")).json()
            assert _texts(shown) == ["first question", "answer one"]
            assert shown["title"] == "first question"

            taken = await http.post(f"{base}/sessions/s1/fork", json={"session_id": "copy"})
            assert taken.status_code == 409
            assert taken.json() == {"error": {"type": "SessionExists", "message": "the session 'copy' exists already"}}
            no_turn = await http.post(f"{base}/sessions/s1/fork", json={"turn": 3})
            assert no_turn.status_code == 400
            assert no_turn.json()["error"]["message"] == "the session 's1' has 2 turns; fork from turn 1 to 2"
            unknown = await http.post(f"{base}/sessions/nobody/fork", json={})
            assert unknown.status_code == 404
            assert unknown.json() == {"error": {"type": "NotFound", "message": "no stored session 'nobody' to fork"}}
            bad = await http.post(f"{base}/sessions/s1/fork", json={"turn": "one"})
            assert bad.status_code == 400 and "'turn' must be a whole number" in bad.json()["error"]["message"]


async def test_a_running_session_is_not_forked(serving: Serving) -> None:
    model = ScriptedModel([asks(call("q1", "ask_user", question="Which colour?")), AssistantMessage("ok")])
    client = await create_agent(model, extensions=[AskUserExtension()])
    with trio.fail_after(30):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            request_id = await start(http, base, "s1", "pick one")

            async def fork_while_waiting(event: dict[str, object]) -> None:
                if event["type"] == "ask_user":
                    busy = await http.post(f"{base}/sessions/s1/fork", json={})
                    assert busy.status_code == 409
                    assert busy.json() == {
                        "error": {
                            "type": "SessionBusy",
                            "message": "session 's1' already has a running request; fork it when the run has ended",
                        }
                    }
                    await http.post(f"{base}/runs/{request_id}/cancel", json={})

            await read_sse(http, f"{base}/runs/{request_id}/events", on_event=fork_while_waiting)


async def test_titles_are_listed_set_and_kept_beside_the_database(serving: Serving, tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    client = await _client(SQLiteSessionStore(db))
    with trio.fail_after(30):
        async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
            await _two_turns(http, base)
            listed = (await http.get(f"{base}/sessions")).json()["sessions"]
            assert [(s["session_id"], s["title"]) for s in listed] == [("s1", "first question")]
            put = await http.put(f"{base}/sessions/s1/title", json={"title": "Parser work"})
            assert put.status_code == 200 and put.json() == {"session_id": "s1", "title": "Parser work"}
            assert (await http.get(f"{base}/sessions/s1")).json()["title"] == "Parser work"
            forked = await http.post(f"{base}/sessions/s1/fork", json={"session_id": "s2", "turn": 2})
            assert forked.status_code == 201 and forked.json()["messages"] == 4
            listed = (await http.get(f"{base}/sessions")).json()["sessions"]
            assert {s["session_id"]: s["title"] for s in listed} == {"s1": "Parser work", "s2": "Parser work (fork)"}

            missing = await http.put(f"{base}/sessions/nobody/title", json={"title": "x"})
            assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFound"
            blank = await http.put(f"{base}/sessions/s1/title", json={"title": "  "})
            assert blank.status_code == 400
            assert blank.json()["error"]["message"] == "'title' must be 1 to 200 characters, not all blank"
            text = await http.put(f"{base}/sessions/s1/title", content=b"{}", headers={"content-type": "text/plain"})
            assert text.status_code == 415
    # the same file `python -m orchestrator sessions list` reads
    assert json.loads((tmp_path / "sessions.db.titles.json").read_text()) == {
        "s1": "Parser work",
        "s2": "Parser work (fork)",
    }


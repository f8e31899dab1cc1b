"""Identities over HTTP: two principals never see, read, stream, answer, steer or change each other's sessions,
through any route or protocol adapter, in one process (trio and asyncio hosts) and on a web node with a worker."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx
import pytest
import trio

from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.server import create_app
from orchestrator.server.identity import SessionRef, Unauthenticated
from orchestrator.store.runs_sql import SQLRunStore, postgres_run_store, sqlite_run_store
from tests.cluster import apps
from tests.protocols.agui_support import agui_events, run_input
from tests.server.support import SSE, read_sse, serving_on

KINDS = ("hypercorn", "uvicorn", "webnode", "webnode-postgres")
"""One process on trio, one process on asyncio (an AgentHost), and a web node with a worker on SQLite, then on
PostgreSQL."""
TOKENS = {"alice-token": "alice", "bob-token": "bob", "carol-token": "carol"}
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}
CAROL = {"Authorization": "Bearer carol-token"}
SESSION = "alice-session-1"
GHOST_SESSION = "ghost-session-1"
GHOST_RUN = "0" * 32


def by_bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, credential = headers.get("authorization", "").partition(" ")
    return TOKENS.get(credential) if scheme.lower() == "bearer" else None


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")


@asynccontextmanager
async def served(kind: str, tmp_path: Path, dsn: str | None = None, **settings: Any) -> AsyncIterator[str]:
    """The approval agent (record, lookup, then ask_user) served by ``kind``; yields the base URL.

    A web node and its worker share a run store: SQLite in ``tmp_path``, or PostgreSQL at ``dsn``."""
    settings.setdefault("authenticate", by_bearer)
    if not kind.startswith("webnode"):
        async with serving_on(kind)(await apps.approval_agent(), **settings) as base:
            yield base
        return
    path = str(tmp_path / "cluster.db")

    def store() -> SQLRunStore:
        return postgres_run_store(dsn) if dsn is not None else sqlite_run_store(path)

    carried, served_from = store(), store()
    worker = Worker(await apps.approval_agent(), carried, name="w", poll_seconds=0.05)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            backend = StoreBackend(served_from, poll_seconds=0.02)
            async with serving_on("hypercorn")(backend, **settings) as base:
                yield base
            nursery.cancel_scope.cancel()
    finally:  # their watching threads end with them
        carried.close()
        served_from.close()


class Serve(Protocol):
    def __call__(self, **settings: Any) -> AbstractAsyncContextManager[str]: ...


@pytest.fixture
def serve(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Serve:
    """``served`` for the test's ``kind`` (a throwaway PostgreSQL database for webnode-postgres)."""
    dsn = request.getfixturevalue("postgres_dsn") if kind == "webnode-postgres" else None

    def open_served(**settings: Any) -> AbstractAsyncContextManager[str]:
        return served(kind, tmp_path, dsn, **settings)

    return open_served


async def started_and_waiting(http: httpx.AsyncClient, base: str, session: str, text: str) -> str:
    """Start a run of ``session`` as alice and wait until it asks its question; its request id."""
    started = await http.post(f"{base}/sessions/{session}/runs", json={"input": text}, headers=ALICE)
    assert started.status_code == 202, started.text
    request_id: str = started.json()["request_id"]
    await waiting(http, base, session, ALICE)
    return request_id


async def waiting(http: httpx.AsyncClient, base: str, session: str, headers: Mapping[str, str]) -> dict[str, Any]:
    while True:
        shown = await http.get(f"{base}/sessions/{session}", headers=headers)
        if shown.status_code == 200 and shown.json()["pending"]:
            call: dict[str, Any] = shown.json()["pending"][0]
            return call
        await trio.sleep(0.05)


async def answer_and_finish(http: httpx.AsyncClient, base: str, request_id: str, headers: Mapping[str, str]) -> SSE:
    call = await waiting(http, base, SESSION, headers)
    payload = {"tool_call_id": call["tool_call_id"], "answer": "yes"}
    posted = await http.post(
        f"{base}/sessions/{SESSION}/events", json={"name": "ask_user_response", "payload": payload}, headers=headers
    )
    assert posted.status_code == 202, posted.text
    async with httpx.AsyncClient(timeout=20, headers=dict(headers)) as reader:
        return await read_sse(reader, f"{base}/runs/{request_id}/events", stop=_terminal)


def started_event(got: SSE) -> dict[str, Any]:
    return next(event for event in got.events if event["type"] == "run_started")


def _terminal(event: dict[str, Any]) -> bool:
    return event["type"] in ("run_completed", "run_failed", "run_cancelled")


def unmasked(text: str, request_id: str) -> str:
    """A body about alice's session and run, with the ids of a session and run nobody has in their place."""
    return text.replace(SESSION, GHOST_SESSION).replace(request_id, GHOST_RUN)


NATIVE_PROBES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/sessions/{s}", None),
    ("GET", "/sessions/{s}/export", None),
    ("GET", "/runs/{r}", None),
    ("GET", "/runs/{r}/events", None),
    ("GET", "/runs/{r}/trace", None),
    ("POST", "/runs/{r}/cancel", None),
    ("POST", "/sessions/{s}/events", {"name": "ask_user_response", "payload": {"answer": "no"}}),
    ("POST", "/sessions/{s}/events", {"name": "steering_message", "payload": {"content": "stop that"}}),
    ("POST", "/sessions/{s}/fork", {}),
    ("PUT", "/sessions/{s}/title", {"title": "bob's now"}),
    ("DELETE", "/sessions/{s}", None),
    ("DELETE", "/sessions/{s}?cancel=true", None),
]


async def probe(
    http: httpx.AsyncClient, base: str, method: str, path: str, body: dict[str, Any] | None, headers: Mapping[str, str]
) -> httpx.Response:
    return await http.request(method, base + path, json=body, headers=dict(headers))


@pytest.mark.parametrize("kind", KINDS)
async def test_native_routes_show_another_principals_session_as_an_unknown_one(kind: str, serve: Serve) -> None:
    with trio.fail_after(60):
        async with serve() as base, httpx.AsyncClient(timeout=20) as http:
            request_id = await started_and_waiting(http, base, SESSION, "paint")
            for method, template, body in NATIVE_PROBES:
                foreign = await probe(http, base, method, template.format(s=SESSION, r=request_id), body, BOB)
                ghost = await probe(http, base, method, template.format(s=GHOST_SESSION, r=GHOST_RUN), body, BOB)
                where = f"{method} {template}"
                assert foreign.status_code == 404, (where, foreign.text)
                assert (foreign.status_code, unmasked(foreign.text, request_id)) == (ghost.status_code, ghost.text)
            taken = await http.post(f"{base}/sessions/{SESSION}/runs", json={"input": "mine now"}, headers=BOB)
            assert taken.status_code == 404
            assert taken.json() == {"error": {"type": "NotFound", "message": f"no session {SESSION!r}"}}

            assert (await http.get(f"{base}/sessions", headers=BOB)).json() == {"sessions": []}
            listed = (await http.get(f"{base}/sessions", headers=ALICE)).json()["sessions"]
            assert [s["session_id"] for s in listed] == [SESSION]

            got = await answer_and_finish(http, base, request_id, ALICE)
            assert started_event(got)["metadata"] == {"principal": "alice"}
            assert got.events[-1]["type"] == "run_completed"
            assert got.events[-1]["result"]["content"] == "Done with paint: yes."
            assert not any(event["type"].startswith("steering") for event in got.events)
            shown = (await http.get(f"{base}/sessions/{SESSION}", headers=ALICE)).json()
            assert shown["messages"][0]["role"] == "user" and shown["pending"] == []


async def rpc(http: httpx.AsyncClient, base: str, method: str, params: Any, headers: Mapping[str, str]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = await http.post(f"{base}/a2a", json=body, headers=dict(headers))
    assert response.status_code == 200, response.text
    return response.json()


def a2a_message(text: str | None = None, data: dict[str, Any] | None = None, **ids: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": text}] if text is not None else [{"data": data}]
    return {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": parts, **ids}}


@pytest.mark.parametrize("kind", KINDS)
async def test_a2a_shows_another_principals_tasks_and_contexts_as_unknown_ones(kind: str, serve: Serve) -> None:
    with trio.fail_after(60):
        async with serve() as base, httpx.AsyncClient(timeout=20) as http:
            card = await http.get(f"{base}/.well-known/agent-card.json")
            assert card.status_code == 200  # public
            task = (await rpc(http, base, "SendMessage", a2a_message("paint", contextId=SESSION), ALICE))["result"]
            task_id = task["task"]["id"]
            assert task["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            probes: list[tuple[str, Any]] = [
                ("GetTask", {"id": "{r}"}),
                ("CancelTask", {"id": "{r}"}),
                ("SubscribeToTask", {"id": "{r}"}),
                ("SendMessage", a2a_message(data={"answer": "no"}, taskId="{r}")),
                ("SendMessage", a2a_message("stop that", taskId="{r}")),
                ("SendMessage", a2a_message(data={"answer": "no"}, contextId="{s}")),
            ]
            for method, params in probes:
                text = json.dumps(params)
                mine = json.loads(text.replace("{r}", task_id).replace("{s}", SESSION))
                foreign = await rpc(http, base, method, mine, BOB)
                ghost = await rpc(
                    http, base, method, json.loads(text.replace("{r}", GHOST_RUN).replace("{s}", GHOST_SESSION)), BOB
                )
                assert "error" in foreign, (method, foreign)
                assert unmasked(json.dumps(foreign), task_id) == json.dumps(ghost), method
            taken = await rpc(http, base, "SendMessage", a2a_message("mine now", contextId=SESSION), BOB)
            assert taken["error"] == {"code": -32001, "message": f"no session {SESSION!r}"}
            assert (await rpc(http, base, "ListTasks", {}, BOB))["result"]["tasks"] == []
            mine = (await rpc(http, base, "ListTasks", {}, ALICE))["result"]["tasks"]
            assert [t["id"] for t in mine] == [task_id]

            done = await rpc(http, base, "SendMessage", a2a_message(data={"answer": "yes"}, taskId=task_id), ALICE)
            assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            assert done["result"]["task"]["artifacts"][0]["parts"] == [{"text": "Done with paint: yes."}]


@pytest.mark.parametrize("kind", KINDS)
async def test_agui_threads_of_another_principal_are_neither_run_nor_resumed(kind: str, serve: Serve) -> None:
    with trio.fail_after(60):
        async with serve() as base, httpx.AsyncClient(timeout=20) as http:
            http.headers.update(ALICE)
            first = await agui_events(http, base, run_input(SESSION, "paint"))
            [asked] = first[-1]["outcome"]["interrupts"]
            http.headers.update(BOB)
            started = await agui_events(http, base, run_input(SESSION, "mine now"))
            assert started[-1] == {"type": "RUN_ERROR", "code": "NotFound", "message": f"no session {SESSION!r}"}
            steered = await agui_events(http, base, run_input(SESSION, "stop", parentRunId=first[0]["runId"]))
            assert steered[-1]["type"] == "RUN_ERROR" and steered[-1]["code"] == "NotFound"
            resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "no"}}]
            resumed = await agui_events(http, base, run_input(SESSION, resume=resume))
            assert resumed[-1]["type"] == "RUN_ERROR" and resumed[-1]["code"] == "UnknownInterrupt"
            http.headers.update(ALICE)
            resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "yes"}}]
            second = await agui_events(http, base, run_input(SESSION, resume=resume))
            assert second[-1]["type"] == "RUN_FINISHED" and second[-1]["result"] == "Done with paint: yes."


@pytest.mark.parametrize("kind", KINDS)
async def test_ai_sdk_chats_of_another_principal_are_neither_run_nor_answered(kind: str, serve: Serve) -> None:
    with trio.fail_after(60):
        async with serve() as base, httpx.AsyncClient(timeout=20) as http:
            await started_and_waiting(http, base, SESSION, "paint")
            call = await waiting(http, base, SESSION, ALICE)
            user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "mine now"}]}
            taken = await http.post(f"{base}/ai-sdk/chat", json={"id": SESSION, "messages": [user]}, headers=BOB)
            assert taken.status_code == 404
            assert taken.json() == {"error": {"type": "NotFound", "message": f"no session {SESSION!r}"}}
            part = {"type": "tool-ask_user", "toolCallId": call["tool_call_id"], "state": "output-available"}
            answer = {"id": "a1", "role": "assistant", "parts": [{**part, "input": {}, "output": "no"}]}
            chat = f"{base}/ai-sdk/chat"
            foreign = await http.post(chat, json={"id": SESSION, "messages": [answer]}, headers=BOB)
            ghost = await http.post(chat, json={"id": GHOST_SESSION, "messages": [answer]}, headers=BOB)
            assert foreign.status_code == 404, foreign.text
            assert (foreign.status_code, foreign.text) == (ghost.status_code, ghost.text)
            assert (await waiting(http, base, SESSION, ALICE))["tool_call_id"] == call["tool_call_id"]


def approver(principal: str, action: str, session: SessionRef) -> bool:
    """Carol may read, follow and answer every session; only its owner may do anything else."""
    return principal == session.owner or (principal == "carol" and action in ("read", "stream", "answer"))


@pytest.mark.parametrize("kind", KINDS)
async def test_an_approver_that_authorize_allows_answers_a_session_it_does_not_own(kind: str, serve: Serve) -> None:
    async def slow_approver(principal: str, action: str, session: SessionRef) -> bool:
        await anyio.sleep(0)
        return approver(principal, action, session)

    with trio.fail_after(60):
        async with serve(authorize=slow_approver) as base, httpx.AsyncClient(timeout=20) as http:
            request_id = await started_and_waiting(http, base, SESSION, "paint")
            bobs = await http.post(f"{base}/sessions/bob-session-1/runs", json={"input": "sand"}, headers=BOB)
            assert bobs.status_code == 202, bobs.text
            listed = (await http.get(f"{base}/sessions", headers=CAROL)).json()["sessions"]
            assert sorted(s["session_id"] for s in listed) == ["alice-session-1", "bob-session-1"]
            listed = (await http.get(f"{base}/sessions", headers=BOB)).json()["sessions"]
            assert [s["session_id"] for s in listed] == ["bob-session-1"]
            listed = (await http.get(f"{base}/sessions", headers=ALICE)).json()["sessions"]
            assert [s["session_id"] for s in listed] == [SESSION]
            cancel = await http.post(f"{base}/runs/{request_id}/cancel", headers=CAROL)
            assert cancel.status_code == 404
            steer = {"name": "steering_message", "payload": {"content": "faster"}}
            steered = await http.post(f"{base}/sessions/{SESSION}/events", json=steer, headers=CAROL)
            assert steered.status_code == 404
            assert (await http.delete(f"{base}/sessions/{SESSION}", headers=CAROL)).status_code == 404
            got = await answer_and_finish(http, base, request_id, CAROL)
            assert got.events[-1]["result"]["content"] == "Done with paint: yes."
            assert started_event(got)["metadata"] == {"principal": "alice"}


def forks_freely(principal: str, action: str, session: SessionRef) -> bool:
    """Anybody may read and fork every session; only its owner may do anything else."""
    return principal == session.owner or action in ("read", "fork")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_fork_is_the_forking_principals_own_session(kind: str, serve: Serve) -> None:
    with trio.fail_after(60):
        async with serve(authorize=forks_freely) as base, httpx.AsyncClient(timeout=20) as http:
            request_id = await started_and_waiting(http, base, SESSION, "paint")
            await answer_and_finish(http, base, request_id, ALICE)
            forked = await http.post(f"{base}/sessions/{SESSION}/fork", json={"session_id": "bobs-copy"}, headers=BOB)
            assert forked.status_code == 201, forked.text
            titled = await http.put(f"{base}/sessions/bobs-copy/title", json={"title": "Bob's"}, headers=BOB)
            assert titled.status_code == 200, titled.text
            refused = await http.put(f"{base}/sessions/bobs-copy/title", json={"title": "Alice's"}, headers=ALICE)
            assert refused.status_code == 404, refused.text  # alice may read bob's fork, not title it
            started = await http.post(f"{base}/sessions/bobs-copy/runs", json={"input": "sand"}, headers=BOB)
            assert started.status_code == 202, started.text
            taken = await http.post(f"{base}/sessions/{SESSION}/runs", json={"input": "mine?"}, headers=BOB)
            assert taken.status_code == 404, taken.text  # the source is still alice's alone
            listed = (await http.get(f"{base}/sessions", headers=BOB)).json()["sessions"]
            assert {s["session_id"]: s["title"] for s in listed} == {SESSION: "paint", "bobs-copy": "Bob's"}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_request_without_credentials_is_a_401_with_its_reason(kind: str, serve: Serve) -> None:
    def refusing(headers: Mapping[str, str]) -> str | None:
        if "authorization" not in headers:
            return None
        if headers["Authorization"] == "Bearer expired":
            raise Unauthenticated("the token has expired")
        return by_bearer(headers)

    with trio.fail_after(60):
        async with serve(authenticate=refusing) as base, httpx.AsyncClient(timeout=20) as http:
            for path in ("/sessions", f"/sessions/{SESSION}", "/runs/x", "/metrics", "/openapi.json"):
                missing = await http.get(base + path)
                assert missing.status_code == 401, path
                assert missing.headers["www-authenticate"] == 'Bearer realm="orchestrator"'
                reason = "the request carries no credentials this server accepts"
                assert missing.json() == {"error": {"type": "Unauthorized", "message": reason}}
            wrong = await http.post(f"{base}/a2a", json={}, headers={"Authorization": "Bearer nobody"})
            assert wrong.status_code == 401
            expired = await http.get(f"{base}/sessions", headers={"Authorization": "Bearer expired"})
            assert expired.status_code == 401
            assert expired.json() == {"error": {"type": "Unauthorized", "message": "the token has expired"}}
            assert (await http.get(f"{base}/health")).status_code == 200
            assert (await http.get(f"{base}/.well-known/agent-card.json")).status_code == 200
            assert (await http.get(f"{base}/sessions", headers=ALICE)).status_code == 200


async def test_token_and_authenticate_together_are_refused_and_authorize_needs_authenticate() -> None:
    client = await apps.approval_agent()
    with pytest.raises(ValueError, match="a token or an authenticate function, not both"):
        create_app(client, token="t", authenticate=by_bearer)
    with pytest.raises(ValueError, match="authorize needs authenticate"):
        create_app(client, authorize=approver)


async def test_an_authenticate_that_fails_or_gives_no_str_is_a_500_with_the_reason(tmp_path: Path) -> None:
    def broken(headers: Mapping[str, str]) -> str | None:
        raise RuntimeError("the identity provider is down")

    def numeric(headers: Mapping[str, str]) -> Any:
        return 42

    with trio.fail_after(30):
        async with served("hypercorn", tmp_path, authenticate=broken) as base, httpx.AsyncClient() as http:
            failed = await http.get(f"{base}/sessions")
            assert failed.status_code == 500
            assert failed.json()["error"] == {
                "type": "AuthenticationFailed",
                "message": "authenticating the request failed (RuntimeError)",
            }
        async with served("hypercorn", tmp_path, authenticate=numeric) as base, httpx.AsyncClient() as http:
            odd = await http.get(f"{base}/sessions")
            assert odd.status_code == 500 and "not 42" in odd.json()["error"]["message"]


async def test_ownership_survives_a_restart_of_one_process_on_sqlite(tmp_path: Path) -> None:
    from orchestrator import AgentClient, AssistantMessage, ScriptedModel, create_agent

    async def client() -> AgentClient:
        store = SQLiteSessionStore(str(tmp_path / "sessions.db"))
        model = ScriptedModel([AssistantMessage("hi")], repeat_last=True)
        return await create_agent(model, history=None, extensions=[store])

    with trio.fail_after(60):
        for _ in range(2):  # two processes in turn over one SQLite file
            serving = serving_on("hypercorn")
            async with serving(await client(), authenticate=by_bearer) as base, httpx.AsyncClient(timeout=20) as http:
                if not (await http.get(f"{base}/sessions", headers=ALICE)).json()["sessions"]:
                    url = f"{base}/sessions/{SESSION}/runs"
                    started = await http.post(url, json={"input": "hello"}, headers=ALICE)
                    http.headers.update(ALICE)
                    got = await read_sse(http, f"{base}/runs/{started.json()['request_id']}/events", stop=_terminal)
                    assert got.events[-1]["type"] == "run_completed", got.events[-1]
                    continue
                # The second process: the session is still alice's alone.
                assert (await http.get(f"{base}/sessions", headers=BOB)).json() == {"sessions": []}
                assert (await http.get(f"{base}/sessions/{SESSION}", headers=BOB)).status_code == 404
                taken = await http.post(f"{base}/sessions/{SESSION}/runs", json={"input": "mine"}, headers=BOB)
                assert taken.status_code == 404
                assert (await http.get(f"{base}/sessions/{SESSION}", headers=ALICE)).status_code == 200
                again = await http.post(f"{base}/sessions/{SESSION}/runs", json={"input": "again"}, headers=ALICE)
                assert again.status_code == 202


async def test_ownership_survives_a_restart_of_the_web_node_on_sqlite(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with served("webnode", tmp_path) as base, httpx.AsyncClient(timeout=20) as http:
            await started_and_waiting(http, base, SESSION, "paint")
        async with served("webnode", tmp_path) as base, httpx.AsyncClient(timeout=20) as http:
            assert (await http.get(f"{base}/sessions", headers=BOB)).json() == {"sessions": []}
            assert (await http.get(f"{base}/sessions/{SESSION}", headers=BOB)).status_code == 404
            call = await waiting(http, base, SESSION, ALICE)
            assert call["event"] == "ask_user"


@pytest.mark.parametrize("kind", KINDS)
async def test_an_idempotency_key_replays_an_answer_to_its_own_principal_only(kind: str, serve: Serve) -> None:
    with trio.fail_after(60):
        async with serve() as base, httpx.AsyncClient(timeout=20) as http:
            url, body = f"{base}/sessions/{SESSION}/runs", {"input": "paint"}
            first = await http.post(url, json=body, headers={**ALICE, "Idempotency-Key": "k1"})
            assert first.status_code == 202, first.text
            again = await http.post(url, json=body, headers={**ALICE, "Idempotency-Key": "k1"})
            assert (again.status_code, again.json()) == (202, first.json())
            replayed = await http.post(url, json=body, headers={**BOB, "Idempotency-Key": "k1"})
            assert replayed.status_code == 404, replayed.text
            assert replayed.json() == {"error": {"type": "NotFound", "message": f"no session {SESSION!r}"}}


async def test_two_web_nodes_over_one_store_agree_on_the_owner(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    with trio.fail_after(60):
        async with served("webnode", tmp_path) as first, httpx.AsyncClient(timeout=20) as http:
            other_store = sqlite_run_store(path)
            other = StoreBackend(other_store, poll_seconds=0.02)
            async with serving_on("hypercorn")(other, authenticate=by_bearer) as second:  # type: ignore[arg-type]
                request_id = await started_and_waiting(http, first, SESSION, "paint")
                assert (await http.get(f"{second}/sessions", headers=BOB)).json() == {"sessions": []}
                assert (await http.get(f"{second}/runs/{request_id}", headers=BOB)).status_code == 404
                taken = await http.post(f"{second}/sessions/{SESSION}/runs", json={"input": "x"}, headers=BOB)
                assert taken.status_code == 404
                got = await answer_and_finish(http, second, request_id, ALICE)
                assert got.events[-1]["result"]["content"] == "Done with paint: yes."
            other_store.close()


async def test_an_authorize_that_fails_is_a_500_with_the_reason(tmp_path: Path) -> None:
    def broken(principal: str, action: str, session: SessionRef) -> bool:
        raise LookupError("the policy service is down")

    with trio.fail_after(30):
        async with served("hypercorn", tmp_path, authorize=broken) as base, httpx.AsyncClient(timeout=20) as http:
            started = await http.post(f"{base}/sessions/{SESSION}/runs", json={"input": "paint"}, headers=ALICE)
            assert started.status_code == 202  # a new session asks nobody
            failed = await http.get(f"{base}/sessions/{SESSION}", headers=ALICE)
            assert failed.status_code == 500
            message = "authorizing 'read' on a session failed (LookupError)"
            assert failed.json() == {"error": {"type": "AuthorizationFailed", "message": message}}

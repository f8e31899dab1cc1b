"""The service over a real loopback socket (hypercorn's trio worker), driven with httpx."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from starlette.applications import Starlette

from orchestrator import (
    AgentClient,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolMessage,
    create_agent,
    tool,
)
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.steering import SteeringExtension
from orchestrator.server import create_app
from tests.server.support import SSE, Serving, read_sse
from tests.support import asks, call

TERMINAL = ("run_completed", "run_failed", "run_cancelled")


def _last_result(request: ModelRequest) -> str:
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    return results[-1].content if results else ""


async def plan_mode_client(root: Path) -> AgentClient:
    model = ScriptedModel(
        [
            asks(call("c1", "enter_plan_mode", reason="the change is large"), text="Let me plan."),
            asks(call("c2", "exit_plan_mode", plan="1. change it\n2. test it")),
            AssistantMessage("Planned and approved."),
        ]
    )
    return await create_agent(model, extensions=[PlanModeExtension(root=root)])


async def ask_user_client() -> AgentClient:
    model = ScriptedModel(
        [
            asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"])),
            lambda request: AssistantMessage(f"You chose {_last_result(request)}."),
        ]
    )
    return await create_agent(model, extensions=[AskUserExtension()])


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


async def start(http: httpx.AsyncClient, base: str, session: str, text: str, **extra: Any) -> str:
    response = await http.post(f"{base}/sessions/{session}/runs", json={"input": text, **extra})
    assert response.status_code == 202, response.text
    request_id: str = response.json()["request_id"]
    return request_id


async def answer(
    http: httpx.AsyncClient, base: str, session: str, name: str, payload: dict[str, Any], **headers: str
) -> httpx.Response:
    return await http.post(
        f"{base}/sessions/{session}/events", json={"name": name, "payload": payload}, headers=headers
    )


def phases(got: SSE) -> list[str]:
    return [e["dest"] for e in got.events if e["type"] == "transition" and e["region"] == "phase"]


async def test_a_plan_mode_run_is_approved_over_post_and_its_stream_ends_with_completion(
    serving: Serving, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    client = await plan_mode_client(tmp_path)
    with trio.fail_after(20):
        async with serving(client) as base:
            request_id = await start(http, base, "s1", "refactor the parser")

            async def approve(event: dict[str, Any]) -> None:
                if event["type"] in ("enter_plan_mode", "exit_plan_mode"):
                    response = await answer(
                        http,
                        base,
                        "s1",
                        event["response_event"],
                        {"tool_call_id": event["tool_call_id"], "approved": True},
                    )
                    assert response.status_code == 202, response.text
                    assert response.json() == {"accepted": ["PlanModeExtension"]}

            got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=approve)
    assert got.types[-1] == "run_completed"
    assert got.events[-1]["result"]["content"] == "Planned and approved."
    assert "awaiting_approval" in phases(got)
    modes = [e["dest"] for e in got.events if e["type"] == "transition" and e["region"] == "mode"]
    assert "plan_active" in modes
    assert [int(i) for i, _, _ in got.frames] == list(range(1, len(got.frames) + 1))
    assert all(data["seq"] == int(i) and data["type"] == kind for i, kind, data in got.frames)


async def test_an_ask_user_question_is_answered_by_option(serving: Serving, http: httpx.AsyncClient) -> None:
    client = await ask_user_client()
    with trio.fail_after(20):
        async with serving(client) as base:
            request_id = await start(http, base, "s2", "paint it")

            async def reply(event: dict[str, Any]) -> None:
                if event["type"] == "ask_user":
                    assert event["options"] == ["red", "blue"]
                    response = await answer(
                        http, base, "s2", "ask_user_response", {"tool_call_id": "q1", "answer": "blue"}
                    )
                    assert response.status_code == 202, response.text

            got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=reply)
    assert got.types[-1] == "run_completed"
    assert "You chose blue." in json.dumps(got.events[-1])


async def test_stale_duplicate_and_malformed_answers_are_refused_with_their_reason(
    serving: Serving, http: httpx.AsyncClient,
) -> None:
    client = await ask_user_client()
    with trio.fail_after(20):
        async with serving(client) as base:
            nothing = await answer(http, base, "s3", "ask_user_response", {"tool_call_id": "q1", "answer": "red"})
            assert nothing.status_code == 409
            assert "AskUserExtension" in nothing.json()["refused"]
            request_id = await start(http, base, "s3", "paint it")
            async with http.stream("GET", f"{base}/runs/{request_id}/events") as stream:
                async for line in stream.aiter_lines():
                    if line == "event: ask_user":
                        break
            wrong_id = await answer(http, base, "s3", "ask_user_response", {"tool_call_id": "zz", "answer": "red"})
            assert wrong_id.status_code == 409
            assert "zz" in wrong_id.json()["refused"]["AskUserExtension"]
            malformed = await answer(http, base, "s3", "ask_user_response", {"tool_call_id": "q1", "answer": "green"})
            assert malformed.status_code == 409
            assert "one of" in malformed.json()["refused"]["AskUserExtension"]
            wrong_session = await answer(
                http, base, "other", "ask_user_response", {"tool_call_id": "q1", "answer": "red"}
            )
            assert wrong_session.status_code == 409
            accepted = await answer(http, base, "s3", "ask_user_response", {"tool_call_id": "q1", "answer": "red"})
            assert accepted.status_code == 202
            duplicate = await answer(http, base, "s3", "ask_user_response", {"tool_call_id": "q1", "answer": "red"})
            assert duplicate.status_code == 409
            assert duplicate.json()["error"]["message"]
            not_json = await http.post(
                f"{base}/sessions/s3/events", content=b"{nope", headers={"content-type": "application/json"}
            )
            assert not_json.status_code == 400
            assert "JSON" in not_json.json()["error"]["message"]
            no_name = await http.post(f"{base}/sessions/s3/events", json={"payload": {}})
            assert no_name.status_code == 400
            got = await read_sse(http, f"{base}/runs/{request_id}/events")
    assert got.types[-1] == "run_completed"
    assert "You chose red." in json.dumps(got.events[-1])


async def test_a_retried_post_with_the_same_idempotency_key_is_answered_once(
    serving: Serving, http: httpx.AsyncClient,
) -> None:
    client = await ask_user_client()
    with trio.fail_after(20):
        async with serving(client) as base:
            request_id = await start(http, base, "s4", "paint it")
            async with http.stream("GET", f"{base}/runs/{request_id}/events") as stream:
                async for line in stream.aiter_lines():
                    if line == "event: ask_user":
                        break
            payload = {"tool_call_id": "q1", "answer": "red"}
            first = await answer(http, base, "s4", "ask_user_response", payload, **{"Idempotency-Key": "k1"})
            again = await answer(http, base, "s4", "ask_user_response", payload, **{"Idempotency-Key": "k1"})
            assert (first.status_code, first.json()) == (202, {"accepted": ["AskUserExtension"]})
            assert (again.status_code, again.json()) == (202, {"accepted": ["AskUserExtension"]})
            other = await answer(
                http, base, "s4", "ask_user_response", {**payload, "answer": "blue"}, **{"Idempotency-Key": "k1"}
            )
            assert other.status_code == 422
            got = await read_sse(http, f"{base}/runs/{request_id}/events")
    assert got.types[-1] == "run_completed"


async def test_last_event_id_replays_after_a_dropped_connection_with_every_event_exactly_once(
    serving: Serving, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    client = await plan_mode_client(tmp_path)
    with trio.fail_after(20):
        async with serving(client) as base:
            request_id = await start(http, base, "s5", "plan it")
            url = f"{base}/runs/{request_id}/events"
            first = await read_sse(http, url, stop=lambda e: e["type"] == "enter_plan_mode")
            seen = int(first.frames[-1][0])
            response = await answer(
                http, base, "s5", "enter_plan_mode_response", {"tool_call_id": "c1", "approved": True}
            )
            assert response.status_code == 202
            second = await read_sse(http, url, last_event_id=seen, stop=lambda e: e["type"] == "exit_plan_mode")
            response = await answer(
                http, base, "s5", "exit_plan_mode_response", {"tool_call_id": "c2", "approved": True}
            )
            assert response.status_code == 202
            third = await read_sse(http, url, last_event_id=int(second.frames[-1][0]))
            everything = await read_sse(http, url)
    seqs = [int(i) for got in (first, second, third) for i, _, _ in got.frames]
    assert seqs == list(range(1, len(seqs) + 1))
    assert third.types[-1] == "run_completed"
    assert [e["seq"] for e in everything.events] == seqs


async def test_a_busy_session_refuses_a_second_run_with_the_reason(serving: Serving, http: httpx.AsyncClient) -> None:
    client = await ask_user_client()
    with trio.fail_after(20):
        async with serving(client) as base:
            request_id = await start(http, base, "s6", "paint it")
            busy = await http.post(f"{base}/sessions/s6/runs", json={"input": "again"})
            assert busy.status_code == 409
            assert busy.json()["error"]["type"] == "SessionBusy"
            assert "s6" in busy.json()["error"]["message"]
            cancel = await http.post(f"{base}/runs/{request_id}/cancel")
            assert cancel.status_code == 202
            got = await read_sse(http, f"{base}/runs/{request_id}/events")
    assert got.types[-1] == "run_cancelled"


async def test_a_failing_run_ends_its_stream_with_a_clean_failed_event(
    serving: Serving, http: httpx.AsyncClient,
) -> None:
    def explode(request: ModelRequest) -> AssistantMessage:
        raise RuntimeError("the model fell over")

    client = await create_agent(ScriptedModel([explode]))
    with trio.fail_after(20):
        async with serving(client) as base:
            request_id = await start(http, base, "s7", "hello")
            got = await read_sse(http, f"{base}/runs/{request_id}/events")
    assert got.types[-1] == "run_failed"
    assert got.events[-1]["error"] == {"type": "RuntimeError", "message": "the model fell over"}


async def test_steering_during_a_tool_batch_skips_the_rest_and_answers_the_new_input(
    serving: Serving, http: httpx.AsyncClient,
) -> None:
    started = threading.Event()  # the tool runs in the serving loop, which is another thread under uvicorn
    release = threading.Event()

    @tool(serial=True, loop="trio")
    async def slow(n: int) -> str:
        """Work slowly.

        Args:
            n: which piece
        """
        started.set()
        await trio.to_thread.run_sync(release.wait, 20)
        return f"piece {n}"

    def after_steering(request: ModelRequest) -> AssistantMessage:
        last_user = [m for m in request.messages if m.role == "user"][-1]
        return AssistantMessage(f"Now: {last_user.text}")

    model = ScriptedModel([asks(call("t1", "slow", n=1), call("t2", "slow", n=2)), after_steering])
    client = await create_agent(model, tools=[slow], extensions=[SteeringExtension()])
    with trio.fail_after(20):
        async with serving(client) as base:
            request_id = await start(http, base, "s8", "do the work")

            async def steer(event: dict[str, Any]) -> None:
                if event["type"] == "tool_started" and event["call"]["id"] == "t1":
                    await trio.to_thread.run_sync(started.wait, 20)
                    response = await answer(http, base, "s8", "steering_message", {"content": "stop, do this instead"})
                    assert response.status_code == 202, response.text
                    release.set()

            got = await read_sse(http, f"{base}/runs/{request_id}/events", on_event=steer)
    assert got.types[-1] == "run_completed"
    assert "Now: stop, do this instead" in json.dumps(got.events[-1])
    skipped = [e["call"]["id"] for e in got.events if e["type"] == "tool_skipped"]
    assert skipped == ["t2"]
    accepted = got.types.index("steering_accepted")
    assert accepted < got.types.index("steering_applied") < len(got.types) - 1


async def test_without_the_token_every_route_but_health_is_refused(serving: Serving, http: httpx.AsyncClient) -> None:
    client = await ask_user_client()
    with trio.fail_after(20):
        async with serving(client, token="s3cret") as base:
            assert (await http.get(f"{base}/health")).status_code == 200
            for method, path in [
                ("GET", "/sessions"),
                ("POST", "/sessions/x/runs"),
                ("GET", "/openapi.json"),
            ]:
                refused = await http.request(method, f"{base}{path}")
                assert refused.status_code == 401, path
                assert refused.json()["error"]["type"] == "Unauthorized"
            wrong = await http.get(f"{base}/sessions", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            ok = await http.get(f"{base}/sessions", headers={"Authorization": "Bearer s3cret"})
            assert ok.status_code == 200
            via_query = await http.get(f"{base}/sessions?access_token=s3cret")
            assert via_query.status_code == 200
            posted_via_query = await http.post(f"{base}/sessions/x/runs?access_token=s3cret", json={"input": "x"})
            assert posted_via_query.status_code == 401  # only a GET (an event stream) may carry it in the URL


async def test_bad_input_is_a_400_and_an_oversized_body_a_413(serving: Serving, http: httpx.AsyncClient) -> None:
    client = await ask_user_client()
    with trio.fail_after(20):
        async with serving(client, max_body_bytes=1000) as base:
            for body in ({}, {"input": ""}, {"input": 3}, {"input": "x", "extra": 1}, {"input": []}):
                response = await http.post(f"{base}/sessions/s9/runs", json=body)
                assert response.status_code == 400, body
                assert response.json()["error"]["message"]
            big = await http.post(f"{base}/sessions/s9/runs", json={"input": "x" * 5000})
            assert big.status_code == 413
            bad_after = await http.get(f"{base}/runs/nope/events", headers={"Last-Event-ID": "x"})
            assert bad_after.status_code in (400, 404)
            assert (await http.get(f"{base}/runs/nope/events")).status_code == 404


async def test_sessions_history_trace_and_machines_are_served(serving: Serving, http: httpx.AsyncClient) -> None:
    client = await ask_user_client()
    with trio.fail_after(20):
        async with serving(client) as base:
            request_id = await start(http, base, "s10", "paint it")
            async with http.stream("GET", f"{base}/runs/{request_id}/events") as stream:
                async for line in stream.aiter_lines():
                    if line == "event: ask_user":
                        break
            listed = (await http.get(f"{base}/sessions")).json()["sessions"]
            mine = next(s for s in listed if s["session_id"] == "s10")
            assert mine["state"] == "awaiting_approval"
            assert mine["request_id"] == request_id
            assert [p["tool_call_id"] for p in mine["pending"]] == ["q1"]
            session = (await http.get(f"{base}/sessions/s10")).json()
            assert session["states"] == {"phase": "awaiting_approval", "mode": "normal"}
            assert session["messages"][0]["role"] == "user"
            assert session["pending"][0]["response_event"] == "ask_user_response"
            assert (await http.get(f"{base}/sessions/unknown")).status_code == 404
            trace = await http.get(f"{base}/runs/{request_id}/trace")
            assert trace.status_code == 200
            assert "flowchart" in trace.text and "awaiting_approval" in trace.text
            mmd = await http.get(f"{base}/machines/request.mmd")
            assert mmd.status_code == 200 and "stateDiagram" in mmd.text
            definition = (await http.get(f"{base}/machines/request.json")).json()
            assert [r["name"] for r in definition["regions"]] == ["phase", "mode"]
            assert (await http.get(f"{base}/machines/nope.mmd")).status_code == 404
            await http.post(f"{base}/runs/{request_id}/cancel")


async def test_the_openapi_document_lists_every_route(serving: Serving, http: httpx.AsyncClient) -> None:
    client = await ask_user_client()
    async with serving(client) as base:
        document = (await http.get(f"{base}/openapi.json")).json()
    assert document["openapi"].startswith("3.1")
    assert set(document["paths"]) >= {
        "/sessions",
        "/sessions/{session_id}",
        "/sessions/{session_id}/runs",
        "/sessions/{session_id}/events",
        "/runs/{request_id}/events",
        "/runs/{request_id}/cancel",
        "/runs/{request_id}/trace",
        "/machines/{name}",
    }


def _api_routes(client: AgentClient) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, the console's page and files aside."""
    from starlette.routing import Route

    app = create_app(client)
    while not isinstance(app, Starlette):  # inside the guards
        app = app.app  # type: ignore[attr-defined]
    return [
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route) and route.path not in ("/", "/openapi.json")
        for method in sorted(route.methods or ())
        if method != "HEAD"
    ]


async def test_the_openapi_document_documents_every_route_the_app_serves(
    serving: Serving, http: httpx.AsyncClient,
) -> None:
    client = await ask_user_client()
    routes = _api_routes(client)
    assert len(routes) >= 10
    async with serving(client) as base:
        document = (await http.get(f"{base}/openapi.json")).json()
    documented = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
    assert set(routes) <= documented, set(routes) - documented
    for method, path in routes:
        operation = document["paths"][path][method.lower()]
        assert operation["summary"] and operation["responses"], (method, path)


async def test_with_a_token_every_route_of_the_app_but_health_and_the_agent_card_answers_401(
    serving: Serving, http: httpx.AsyncClient,
) -> None:
    client = await ask_user_client()
    routes = [*_api_routes(client), ("GET", "/openapi.json")]
    with trio.fail_after(20):
        async with serving(client, token="s3cret") as base:
            for method, path in routes:
                concrete = path.format(session_id="s", request_id="r", name="request.mmd")
                answered = await http.request(method, f"{base}{concrete}", json={})
                if path in ("/health", "/.well-known/agent-card.json"):  # public: no data of a session
                    assert answered.status_code == 200
                    continue
                assert answered.status_code == 401, (method, path, answered.text)
                assert answered.json()["error"]["type"] == "Unauthorized"
                assert answered.headers["www-authenticate"].startswith("Bearer")



async def test_with_a_token_the_console_page_and_its_files_load_and_its_data_needs_the_token(
    serving: Serving, http: httpx.AsyncClient,
) -> None:
    import re

    client = await ask_user_client()
    with trio.fail_after(20):
        async with serving(client, token="s3c ret&") as base:
            page = await http.get(f"{base}/")  # a reload, after the console dropped the token from the address
            assert page.status_code == 200
            assets = re.findall(r'(?:src|href)="(static/[^"]+)"', page.text)
            assert len(assets) == 2, page.text
            for asset in assets:
                loaded = await http.get(f"{base}/{asset}")
                assert loaded.status_code == 200, (asset, loaded.text)
            assert (await http.get(f"{base}/static/request.svg")).status_code == 200
            assert (await http.get(f"{base}/machines/request.json")).status_code == 401
            asked = await http.get(f"{base}/machines/request.json", headers={"Authorization": "Bearer s3c ret&"})
            assert asked.status_code == 200


def test_the_console_draws_the_committed_request_diagram() -> None:
    root = Path(__file__).resolve().parents[2]
    console = root / "orchestrator" / "server" / "static" / "request.svg"
    assert console.read_bytes() == (root / "diagrams" / "request.svg").read_bytes(), (
        "regenerate with `python -m orchestrator diagrams`"
    )


async def test_a_machine_diagram_is_served_as_svg_where_graphviz_is_installed_and_refused_with_the_reason_elsewhere(
    serving: Serving, http: httpx.AsyncClient,
) -> None:
    from orchestrator.observe.diagrams import dot_program

    client = await ask_user_client()
    async with serving(client) as base:
        svg = await http.get(f"{base}/machines/run_lease.svg")
    if dot_program() is None:
        assert svg.status_code == 404
        assert "Graphviz" in svg.json()["error"]["message"]
    else:
        assert svg.status_code == 200
        assert svg.headers["content-type"].startswith("image/svg+xml")
        assert "<svg" in svg.text and ">parked<" in svg.text

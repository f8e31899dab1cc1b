"""AG-UI at POST /ag-ui, on each host, every stream judged by ag-ui-validate."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.protocols.agui_support import Ledger, agui_events, approval_client, ask_user_client, run_input
from tests.server.support import Serving

assert_valid_agui = pytest.importorskip(
    "ag_ui_validate.pytest_plugin", reason="ag-ui-validate is not installed (pip install -e '.[test]')"
).assert_valid_agui


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def interrupts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt", finished
    found: list[dict[str, Any]] = finished["outcome"]["interrupts"]
    return found


async def test_an_approved_tool_call_interrupts_the_run_and_the_resume_run_streams_it_to_completion(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    ledger = Ledger()
    async with serving(await approval_client(ledger)) as base:
        first = await agui_events(http, base, run_input("t1"))
        assert_valid_agui(first)
        assert types(first)[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
        assert "STATE_DELTA" in types(first) and "TOOL_CALL_START" in types(first)
        [asked] = interrupts(first)
        assert asked["toolCallId"] == "c1" and "delete_file" in asked["message"]
        assert asked["responseSchema"]["properties"]["approved"] == {"type": "boolean"}
        assert ledger.deleted == []

        resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}]
        second = await agui_events(http, base, run_input("t1", resume=resume))
        assert_valid_agui(second)
        assert types(second)[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
        snapshot = second[1]["messages"]
        assert snapshot[-1]["toolCalls"][0]["id"] == "c1"
        result = next(e for e in second if e["type"] == "TOOL_CALL_RESULT")
        assert result["content"] == "deleted a.txt" and result["metadata"]["orchestrator"]["status"] == "succeeded"
        assert second[-1]["type"] == "RUN_FINISHED" and second[-1]["outcome"] == {"type": "success"}
        assert second[-1]["result"] == "Tool said: deleted a.txt"
        assert ledger.deleted == ["a.txt"]
        # the streamed assistant message keeps its id in the next snapshot
        streamed = next(e for e in first if e["type"] == "TEXT_MESSAGE_START")["messageId"]
        assert streamed in [m["id"] for m in snapshot]


async def test_a_cancelled_interrupt_declines_the_call_which_is_marked_failed(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    ledger = Ledger()
    async with serving(await approval_client(ledger)) as base:
        [asked] = interrupts(await agui_events(http, base, run_input("t2")))
        resume = [{"interruptId": asked["id"], "status": "cancelled"}]
        second = await agui_events(http, base, run_input("t2", resume=resume))
        assert_valid_agui(second)
        result = next(e for e in second if e["type"] == "TOOL_CALL_RESULT")
        assert result["metadata"]["orchestrator"]["status"] == "failed"
        assert second[-1]["type"] == "RUN_FINISHED"
        assert ledger.deleted == []


async def test_an_ask_user_question_is_answered_through_resume(serving: Serving, http: httpx.AsyncClient) -> None:
    async with serving(await ask_user_client()) as base:
        first = await agui_events(http, base, run_input("t3"))
        assert_valid_agui(first)
        [asked] = interrupts(first)
        assert asked["message"] == "Which colour?"
        assert asked["responseSchema"]["properties"]["answer"] == {"type": "string", "enum": ["red", "blue"]}
        resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "blue"}}]
        second = await agui_events(http, base, run_input("t3", resume=resume))
        assert_valid_agui(second)
        assert second[-1]["result"] == "You chose blue."


async def test_bad_answers_are_run_errors_and_leave_the_call_waiting(serving: Serving, http: httpx.AsyncClient) -> None:
    async with serving(await ask_user_client()) as base:
        [asked] = interrupts(await agui_events(http, base, run_input("t4")))
        cases = {
            "AnswerRefused": run_input(
                "t4", resume=[{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "green"}}]
            ),
            "BadAnswer": run_input("t4", resume=[{"interruptId": asked["id"], "status": "resolved", "payload": 3}]),
            "UnknownInterrupt": run_input("t4", resume=[{"interruptId": "nonsense", "status": "resolved"}]),
        }
        for code, body in cases.items():
            events = await agui_events(http, base, body)
            assert_valid_agui(events)
            assert types(events) == ["RUN_STARTED", "RUN_ERROR"] and events[-1]["code"] == code, events
        other = await agui_events(
            http, base, run_input("other", resume=[{"interruptId": asked["id"], "status": "resolved", "payload": {}}])
        )
        assert other[-1]["code"] == "UnknownInterrupt" and "another thread" in other[-1]["message"]
        busy = await agui_events(http, base, run_input("t4", "something else"))
        assert_valid_agui(busy)
        assert busy[-1]["code"] == "SessionBusy"
        pending = (await http.get(f"{base}/sessions/t4")).json()["pending"]
        assert [call["tool_call_id"] for call in pending] == ["q1"]
        good = [{"interruptId": asked["id"], "status": "resolved", "payload": {"answer": "red"}}]
        done = await agui_events(http, base, run_input("t4", resume=good))
        assert done[-1]["result"] == "You chose red."


async def test_malformed_bodies_are_refused_with_a_reason(serving: Serving, http: httpx.AsyncClient) -> None:
    async with serving(await ask_user_client(), token="secret", max_body_bytes=2000) as base:
        auth = {"Authorization": "Bearer secret"}
        unauthorised = await http.post(f"{base}/ag-ui", json=run_input("t5"))
        assert unauthorised.status_code == 401
        malformed = await http.post(
            f"{base}/ag-ui", content=b"{not json", headers={**auth, "Content-Type": "application/json"}
        )
        assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "BadRequest"
        missing = await http.post(f"{base}/ag-ui", json={"threadId": "t5"}, headers=auth)
        assert missing.status_code == 400 and "runId" in missing.json()["error"]["message"]
        wrong = await http.post(f"{base}/ag-ui", json={**run_input("t5"), "messages": "hi"}, headers=auth)
        assert wrong.status_code == 400 and "messages" in wrong.json()["error"]["message"]
        big = await http.post(f"{base}/ag-ui", json=run_input("t5", "x" * 5000), headers=auth)
        assert big.status_code == 413
        assert (await http.get(f"{base}/sessions/t5", headers=auth)).status_code == 404


async def test_a_browser_origin_that_is_allowed_gets_a_preflight_and_others_are_refused(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    page = "http://app.example:3000"
    async with serving(await ask_user_client(), allowed_origins=[page]) as base:
        preflight = await http.options(
            f"{base}/ag-ui",
            headers={
                "Origin": page,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == page
        assert "POST" in preflight.headers["access-control-allow-methods"]
        refused = await http.post(f"{base}/ag-ui", json=run_input("t6"), headers={"Origin": "http://evil.example"})
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "OriginNotAllowed"


async def test_a_client_that_aborts_its_run_cancels_the_request(serving: Serving, http: httpx.AsyncClient) -> None:
    import trio

    from orchestrator import ScriptedModel, create_agent, tool
    from tests.support import asks, call

    @tool(loop="trio")
    async def slow(n: int) -> str:
        """Take a long time."""
        await trio.sleep(60)
        return "late"

    client = await create_agent(ScriptedModel([asks(call("s1", "slow", n=1))]), tools=[slow])
    async with serving(client) as base:
        body = run_input("t7")
        async with http.stream("POST", f"{base}/ag-ui", json=body) as response:
            async for chunk in response.aiter_text():
                if "TOOL_CALL_END" in chunk:
                    break
        with trio.fail_after(5):
            while not (view := (await http.get(f"{base}/runs/{body['runId']}")).json())["done"]:
                await trio.sleep(0.05)
        assert view["state"] == "cancelled"


async def test_a_run_naming_the_active_run_as_parent_steers_it_and_others_are_busy(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    import threading

    import trio

    from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, create_agent, tool
    from orchestrator.extensions.steering import SteeringExtension
    from tests.support import asks, call

    started = threading.Event()
    release = threading.Event()

    @tool(serial=True, loop="trio")
    async def slow(n: int) -> str:
        """Work slowly."""
        started.set()
        await trio.to_thread.run_sync(release.wait, 20)
        return f"piece {n}"

    def after_steering(request: ModelRequest) -> AssistantMessage:
        return AssistantMessage(f"Now: {[m for m in request.messages if m.role == 'user'][-1].text}")

    model = ScriptedModel([asks(call("t1", "slow", n=1), call("t2", "slow", n=2)), after_steering])
    client = await create_agent(model, tools=[slow], extensions=[SteeringExtension()])
    with trio.fail_after(20):
        async with serving(client) as base:
            body = run_input("t8", "do the work")
            results: dict[str, list[dict[str, Any]]] = {}

            async def first_run() -> None:
                results["first"] = await agui_events(http, base, body)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(first_run)
                await trio.to_thread.run_sync(started.wait, 20)
                busy = await agui_events(http, base, run_input("t8", "something else"))
                assert_valid_agui(busy)
                assert busy[-1]["code"] == "SessionBusy"
                wrong = await agui_events(http, base, run_input("t8", "x", parentRunId="not-the-run"))
                assert wrong[-1]["code"] == "SessionBusy"
                steer = await agui_events(
                    http, base, run_input("t8", "stop, do this instead", parentRunId=body["runId"])
                )
                assert_valid_agui(steer)
                assert types(steer) == ["RUN_STARTED", "RUN_FINISHED"]
                assert steer[0]["parentRunId"] == body["runId"]
                release.set()
    first = results["first"]
    assert_valid_agui(first)
    assert first[-1]["type"] == "RUN_FINISHED" and first[-1]["result"] == "Now: stop, do this instead"
    skipped = [e for e in first if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == "t2"]
    assert skipped[0]["metadata"]["orchestrator"]["status"] == "skipped"


async def test_a_failed_request_ends_the_run_with_run_error_and_its_type_as_code(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    from orchestrator import ModelRequest, ScriptedModel, create_agent

    def explode(request: ModelRequest) -> Any:
        raise ValueError("the model broke")

    async with serving(await create_agent(ScriptedModel([explode]))) as base:
        events = await agui_events(http, base, run_input("t9"))
    assert_valid_agui(events)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "ValueError"
    assert "the model broke" in events[-1]["message"]


async def test_a_frontend_tool_call_waits_for_the_result_the_client_supplies(
    serving: Serving, http: httpx.AsyncClient
) -> None:
    from tests.protocols.agui_support import CLIENT_TOOL, client_tool_client

    async with serving(await client_tool_client()) as base:
        first = await agui_events(http, base, run_input("t10", tools=[CLIENT_TOOL]))
        assert_valid_agui(first)
        [asked] = interrupts(first)
        assert asked["toolCallId"] == "f1" and asked["reason"] == "client_tool_call"
        assert asked["responseSchema"]["required"] == ["content"]
        started = next(e for e in first if e["type"] == "TOOL_CALL_START")
        assert started["toolCallName"] == "confirm_colour"
        wrong = [{"interruptId": asked["id"], "status": "resolved", "payload": {"content": 3}}]
        refused = await agui_events(http, base, run_input("t10", resume=wrong))
        assert refused[-1]["code"] == "AnswerRefused"
        good = [{"interruptId": asked["id"], "status": "resolved", "payload": {"content": "blue, confirmed"}}]
        second = await agui_events(http, base, run_input("t10", resume=good))
        assert_valid_agui(second)
        assert second[-1]["result"] == "The client said: blue, confirmed"

"""A2A over JSON-RPC, on each host: the card, the task cycles, and bad input answered as JSON-RPC errors."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio

from tests.protocols.a2a_agent import DEPLOYS, a2a_client
from tests.server.support import Serving

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def rpc(http: httpx.AsyncClient, url: str, method: str, params: Any, **headers: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    response = await http.post(f"{url}/a2a", json=body, headers={**AUTH, **headers})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["id"] == 7
    return answer


def message(text: str | None = None, data: dict[str, Any] | None = None, **ids: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data})
    return {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": parts, **ids}}


async def test_the_card_is_public_and_declares_the_bearer_scheme(serving: Serving) -> None:
    async with serving(await a2a_client(), token=TOKEN) as url, httpx.AsyncClient() as http:
        card = (await http.get(f"{url}/.well-known/agent-card.json")).json()
        assert card["url"] == f"{url}/a2a"
        assert card["supportedInterfaces"][0] == {
            "url": f"{url}/a2a",
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }
        assert card["capabilities"]["streaming"] is True
        assert card["description"] == "A deploy assistant."
        assert {skill["id"] for skill in card["skills"]} == {"deploy", "slow_lookup"}
        assert card["securitySchemes"]["bearer"]["scheme"] == "bearer"
        refused = await http.post(f"{url}/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
        assert refused.status_code == 401


async def test_approve_then_decline_through_input_required(serving: Serving) -> None:
    DEPLOYS.clear()
    async with serving(await a2a_client(), token=TOKEN) as url, httpx.AsyncClient(timeout=30) as http:
        first = (await rpc(http, url, "SendMessage", message("please deploy")))["result"]["task"]
        assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        asked = first["status"]["message"]["parts"][1]["data"]
        assert asked["kind"] == "tool_approval"
        assert asked["responseSchema"]["required"] == ["approved"]
        task_id, context_id = first["id"], first["contextId"]
        wrong = await rpc(http, url, "SendMessage", message(data={"approved": "yes"}, taskId=task_id))
        assert wrong["error"]["code"] == -32602 and "'approved' must be a bool" in wrong["error"]["message"]
        still = (await rpc(http, url, "GetTask", {"id": task_id}))["result"]
        assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" and DEPLOYS == []
        done = (await rpc(http, url, "SendMessage", message(data={"approved": True}, taskId=task_id)))["result"]["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert done["artifacts"][0]["parts"] == [{"text": "done: deployed to staging"}]
        assert DEPLOYS == ["staging"]
        second = (await rpc(http, url, "SendMessage", message("deploy again", contextId=context_id)))["result"]["task"]
        assert second["contextId"] == context_id and second["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        declined = await rpc(http, url, "SendMessage", message(data={"approved": False}, taskId=second["id"]))
        assert declined["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert DEPLOYS == ["staging"]


async def test_free_text_answers_a_question_and_cancel_while_waiting(serving: Serving) -> None:
    async with serving(await a2a_client(), token=TOKEN) as url, httpx.AsyncClient(timeout=30) as http:
        asked = (await rpc(http, url, "message/send", _v03("a free question")))["result"]
        assert asked["kind"] == "task" and asked["status"]["state"] == "input-required"
        answered = await rpc(http, url, "message/send", _v03("Ada", taskId=asked["id"]))
        assert answered["result"]["artifacts"][0]["parts"] == [{"kind": "text", "text": "done: Ada"}]
        waiting = (await rpc(http, url, "SendMessage", message("ask me")))["result"]["task"]
        cancelled = (await rpc(http, url, "CancelTask", {"id": waiting["id"]}))["result"]
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        again = await rpc(http, url, "CancelTask", {"id": waiting["id"]})
        assert again["error"]["code"] == -32002


async def test_a_message_on_a_working_task_steers_it(serving: Serving) -> None:
    async with serving(await a2a_client(), token=TOKEN) as url, httpx.AsyncClient(timeout=30) as http:
        started = await rpc(
            http, url, "SendMessage", {**message("go slow"), "configuration": {"returnImmediately": True}}
        )
        task_id = started["result"]["task"]["id"]
        steered = await rpc(http, url, "SendMessage", message("talk about the moon instead", taskId=task_id))
        task = steered["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"] == [{"text": "steered: talk about the moon instead"}]


def _v03(text: str, **ids: str) -> dict[str, Any]:
    return {
        "message": {
            "kind": "message",
            "messageId": "m",
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
            **ids,
        }
    }


async def test_hosts_and_origins_are_checked_on_the_a2a_routes(serving: Serving) -> None:
    allowed = "http://console.example"
    settings = {"token": TOKEN, "allowed_hosts": ["127.0.0.1"], "allowed_origins": [allowed]}
    async with serving(await a2a_client(), **settings) as url, httpx.AsyncClient(timeout=30) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
        foreign = await http.post(f"{url}/a2a", json=body, headers={**AUTH, "Origin": "http://evil.example"})
        assert foreign.status_code == 403 and foreign.json()["error"]["type"] == "OriginNotAllowed"
        rebound = await http.get(f"{url}/.well-known/agent-card.json", headers={"Host": "evil.example"})
        assert rebound.status_code == 403 and rebound.json()["error"]["type"] == "HostNotAllowed"
        preflight = await http.options(
            f"{url}/a2a",
            headers={
                "Origin": allowed,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, a2a-version",
            },
        )
        assert preflight.status_code in (200, 204), preflight.text
        assert preflight.headers["access-control-allow-origin"] == allowed
        answered = await http.post(f"{url}/a2a", json=body, headers={**AUTH, "Origin": allowed})
        assert answered.json()["error"]["code"] == -32001
        assert answered.headers["access-control-allow-origin"] == allowed
        plain = await http.post(f"{url}/a2a", content=b"{}", headers={**AUTH, "Content-Type": "text/plain"})
        assert plain.status_code == 415 and plain.json()["error"]["type"] == "UnsupportedMediaType"


async def sse_results(http: httpx.AsyncClient, url: str, method: str, params: Any, **headers: str) -> list[Any]:
    body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
    results: list[Any] = []
    async with http.stream("POST", f"{url}/a2a", json=body, headers={**AUTH, **headers}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                frame = json.loads(line[6:])
                assert frame["id"] == 9
                results.append(frame.get("result", frame.get("error")))
    return results


def streamed_answer(results: list[Any]) -> str:
    """The answer the stream's artifact updates (0.3 or 1.0) make, applied as A2A says: ``append`` adds the parts,
    else they replace the artifact's; the last update has ``lastChunk``."""
    kinds = [r for r in results if "artifactUpdate" in r or r.get("kind") == "artifact-update"]
    updates = [r.get("artifactUpdate", r) for r in kinds]
    parts: list[dict[str, Any]] = []
    for update in updates:
        assert update["artifact"]["artifactId"] == updates[0]["artifact"]["artifactId"]
        parts = [*parts, *update["artifact"]["parts"]] if update["append"] else list(update["artifact"]["parts"])
    assert updates and updates[-1]["lastChunk"] is True and not any(u["lastChunk"] for u in updates[:-1])
    return "".join(part["text"] for part in parts)


async def test_streams_in_both_versions_and_subscribe_list(serving: Serving) -> None:
    async with serving(await a2a_client(), token=TOKEN) as url, httpx.AsyncClient(timeout=30) as http:
        results = await sse_results(http, url, "SendStreamingMessage", message("please deploy"))
        assert "task" in results[0] and results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        task_id = results[0]["task"]["id"]
        listed = (await rpc(http, url, "ListTasks", {}))["result"]["tasks"]
        assert [task["id"] for task in listed] == [task_id]
        answered = await sse_results(http, url, "message/stream", _v03_data({"approved": True}, taskId=task_id))
        assert answered[0]["kind"] == "task"
        assert answered[-2]["kind"] == "artifact-update" and answered[-2]["lastChunk"] is True
        assert streamed_answer(answered) == "done: deployed to staging"
        assert answered[-1]["kind"] == "status-update" and answered[-1]["final"] is True
        assert answered[-1]["status"]["state"] == "completed"
        ended = await rpc(http, url, "SubscribeToTask", {"id": task_id})
        assert ended["error"]["code"] == -32004 and "has ended" in ended["error"]["message"]
        as_v03 = await rpc(http, url, "GetTask", {"id": task_id}, **{"A2A-Version": "0.3.0"})
        assert as_v03["result"]["kind"] == "task" and as_v03["result"]["status"]["state"] == "completed"
        assert [m["role"] for m in as_v03["result"]["history"]] == ["user", "agent"]
        assert (await rpc(http, url, "ListTasks", {}))["result"]["tasks"] == []


def _v03_data(data: dict[str, Any], **ids: str) -> dict[str, Any]:
    return {
        "message": {
            "kind": "message",
            "messageId": "m",
            "role": "user",
            "parts": [{"kind": "data", "data": data}],
            **ids,
        }
    }


async def test_a_stream_ends_with_a_reason_when_the_server_stops_and_the_task_goes_on(serving: Serving) -> None:
    stopping: list[str] = []
    settings = {"token": TOKEN, "stop_streams": lambda: stopping[0] if stopping else None}
    async with serving(await a2a_client(), **settings) as url, httpx.AsyncClient(timeout=30) as http:
        params = {**message("go slow"), "configuration": {"returnImmediately": True}}
        task_id = (await rpc(http, url, "SendMessage", params))["result"]["task"]["id"]
        body = {"jsonrpc": "2.0", "id": 9, "method": "SubscribeToTask", "params": {"id": task_id}}
        frames: list[dict[str, Any]] = []
        async with http.stream("POST", f"{url}/a2a", json=body, headers=AUTH) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    frames.append(json.loads(line[6:]))
                    stopping.append("the server is shutting down")
        assert "task" in frames[0]["result"]
        assert frames[-1]["error"]["message"] == "the server is shutting down; the task goes on: SubscribeToTask"
        stopping.clear()
        while (await rpc(http, url, "GetTask", {"id": task_id}))["result"]["status"]["state"] != "TASK_STATE_COMPLETED":
            await trio.sleep(0.05)

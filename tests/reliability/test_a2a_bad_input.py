"""Bad input to A2A's JSON-RPC endpoint is a JSON-RPC error (or a 4xx) with a reason, never a traceback or a hang,
and it leaves the session as it was: the waiting call still waits and nothing it guards has run."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from tests.protocols.a2a_agent import DEPLOYS, a2a_client
from tests.protocols.test_a2a_jsonrpc import AUTH, message, rpc
from tests.server.support import HOSTS, Serving, serving_on


@pytest.fixture(params=HOSTS)
def serving(request: pytest.FixtureRequest) -> Serving:
    return serving_on(request.param)


async def test_bad_answers_are_json_rpc_errors_and_leave_the_task_waiting(serving: Serving) -> None:
    DEPLOYS.clear()
    async with serving(await a2a_client(), token="s3cret") as url, httpx.AsyncClient(timeout=30) as http:
        malformed = await http.post(
            f"{url}/a2a", content=b"{nope", headers={**AUTH, "Content-Type": "application/json"}
        )
        assert malformed.status_code == 200 and malformed.json()["error"]["code"] == -32700
        unknown = await rpc(http, url, "GetTask", {"id": "no-such-task"})
        assert unknown["error"]["code"] == -32001 and "no-such-task" in unknown["error"]["message"]
        assert (await rpc(http, url, "Frobnicate", {}))["error"]["code"] == -32601
        assert (await rpc(http, url, "SendMessage", {"message": "hi"}))["error"]["code"] == -32602
        old = await rpc(http, url, "SendMessage", message("hi"), **{"A2A-Version": "0.1"})
        assert old["error"]["code"] == -32009
        mine = (await rpc(http, url, "SendMessage", message("please deploy", contextId="mine")))["result"]["task"]
        other = await rpc(
            http, url, "SendMessage", message(data={"approved": True}, taskId=mine["id"], contextId="theirs")
        )
        assert other["error"]["code"] == -32602 and "another context" in other["error"]["message"]
        wrong_call = await rpc(
            http, url, "SendMessage", message(data={"toolCallId": "zz", "approved": True}, taskId=mine["id"])
        )
        assert wrong_call["error"]["code"] == -32602 and "zz" in wrong_call["error"]["message"]
        text_for_approval = await rpc(http, url, "SendMessage", message("yes", taskId=mine["id"]))
        assert text_for_approval["error"]["code"] == -32602 and "data part" in text_for_approval["error"]["message"]
        still = (await rpc(http, url, "GetTask", {"id": mine["id"]}))["result"]
        assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" and DEPLOYS == []
        big = await http.post(f"{url}/a2a", json={"x": "y" * 2_000_000}, headers=AUTH)
        assert big.status_code == 413 and big.json()["error"]["type"] == "PayloadTooLarge"


async def test_malformed_envelopes_are_json_rpc_errors_with_a_reason(serving: Serving) -> None:
    async with serving(await a2a_client(), token="s3cret") as url, httpx.AsyncClient(timeout=30) as http:

        async def raw(body: Any) -> dict[str, Any]:
            response = await http.post(f"{url}/a2a", json=body, headers=AUTH)
            assert response.status_code == 200, response.text
            answer: dict[str, Any] = response.json()
            return answer["error"]

        assert (await raw([{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]))["code"] == -32600
        assert (await raw({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}))["code"] == -32600
        bad_id = await http.post(
            f"{url}/a2a", json={"jsonrpc": "2.0", "id": {"x": 1}, "method": "GetTask"}, headers=AUTH
        )
        assert bad_id.json()["id"] is None and bad_id.json()["error"]["code"] == -32600
        assert (await raw({"jsonrpc": "2.0", "id": 1, "method": 5}))["code"] == -32600
        assert (await raw({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]}))["code"] == -32602
        assert (await raw({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}))["code"] == -32602
        deep: Any = []
        for _ in range(200):
            deep = [deep]
        nested = await raw({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": deep}})
        assert nested["code"] == -32700 and "deeper than" in nested["message"]
        push = {"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig", "params": {}}
        assert (await raw(push))["code"] == -32003
        file_part = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "http://x/y.pdf"}]}}
        assert (await rpc(http, url, "SendMessage", file_part))["error"]["code"] == -32005
        agent_role = {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}
        refused = (await rpc(http, url, "SendMessage", agent_role))["error"]
        assert refused["code"] == -32602 and "ROLE_USER" in refused["message"]
        blank = await rpc(http, url, "SendMessage", message("   "))
        assert blank["error"]["code"] == -32602 and "non-blank" in blank["error"]["message"]
        control = await rpc(http, url, "GetTask", {"id": "a\x00b"})
        assert control["error"]["code"] == -32602 and "control character" in control["error"]["message"]
        with trio.fail_after(10):  # an ended task takes no message: an error at once, no wait
            done = (await rpc(http, url, "SendMessage", message("hello")))["result"]["task"]
            ended = await rpc(http, url, "SendMessage", message("more", taskId=done["id"]))
        assert ended["error"]["code"] == -32004 and "has ended" in ended["error"]["message"]

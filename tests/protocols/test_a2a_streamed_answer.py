"""A2A streams (SendStreamingMessage, SubscribeToTask) send the answer as it is written: one artifact update
per text delta (``append`` after the first, ``lastChunk`` on the last), which the Python ``a2a-sdk`` and
``@a2a-js/sdk`` put together into the task's answer, the same text GetTask gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from tests.protocols.a2a_agent import a2a_client
from tests.protocols.test_a2a_jsonrpc import AUTH, TOKEN, message, rpc, sse_results, streamed_answer
from tests.server.support import Serving
from tests.support import asks, call

A2A_JS = Path(__file__).parent / "a2a_js"


def flags(results: list[Any]) -> list[tuple[bool, bool]]:
    updates = [r["artifactUpdate"] for r in results if "artifactUpdate" in r]
    return [(u["append"], u["lastChunk"]) for u in updates]


async def test_the_python_sdk_puts_the_streamed_answer_together(serving: Serving) -> None:
    sdk = pytest.importorskip("a2a.client", reason="a2a-sdk is not installed (setup.cfg's test extra pins it)")
    from a2a.server.tasks.task_manager import append_artifact_to_task
    from a2a.types import a2a_pb2 as a2a

    async with serving(await a2a_client(), token=TOKEN) as url:
        http = httpx.AsyncClient(headers=AUTH, timeout=30)
        client = await sdk.create_client(url, sdk.ClientConfig(streaming=True, httpx_client=http))
        ask = a2a.Message(message_id="m1", role=a2a.Role.ROLE_USER, parts=[a2a.Part(text="please deploy")])
        asked = [r async for r in client.send_message(a2a.SendMessageRequest(message=ask))]
        task_id = asked[0].task.id
        assert asked[-1].status_update.status.state == a2a.TaskState.TASK_STATE_INPUT_REQUIRED
        approve = a2a.Message(message_id="m2", role=a2a.Role.ROLE_USER, task_id=task_id)
        part = a2a.Part()
        part.data.struct_value.update({"approved": True})
        approve.parts.append(part)
        answered = [r async for r in client.send_message(a2a.SendMessageRequest(message=approve))]
        task = answered[0].task
        updates = [r.artifact_update for r in answered if r.HasField("artifact_update")]
        for update in updates:
            append_artifact_to_task(task, update)  # the SDK's reassembly; it refuses an append before a start
        assert len(updates) > 1 and [u.append for u in updates] == [False] + [True] * (len(updates) - 1)
        assert [u.last_chunk for u in updates] == [False] * (len(updates) - 1) + [True]
        streamed = "".join(p.text for p in task.artifacts[0].parts)
        assert streamed == "done: deployed to staging"
        got = await client.get_task(a2a.GetTaskRequest(id=task_id))
        assert [p.text for p in got.artifacts[0].parts] == [streamed]
        await client.close()
        await http.aclose()


async def test_the_js_sdk_puts_the_streamed_answer_together(serving: Serving) -> None:
    node = shutil.which("node")
    if node is None or not (A2A_JS / "node_modules" / "@a2a-js" / "sdk").is_dir():
        pytest.skip("node or @a2a-js/sdk is missing (scripts/test installs it with npm ci in tests/protocols/a2a_js)")
    async with serving(await a2a_client(), token=TOKEN) as url:
        done = await trio.run_process(
            [node, str(A2A_JS / "stream.mjs"), url, TOKEN], capture_stdout=True, capture_stderr=True, check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    completed, input_required = 3, 6  # the SDK's TaskState values
    assert report["asked"] == input_required
    approved = report["approved"]
    assert approved["state"] == completed and approved["answer"] == "done: deployed to staging"
    chunks = approved["chunks"]
    assert len(chunks) > 1 and chunks[0] == {"append": False, "lastChunk": False}
    assert chunks[1:-1] == [{"append": True, "lastChunk": False}] * (len(chunks) - 2)
    assert chunks[-1] == {"append": True, "lastChunk": True}


async def test_subscribing_to_a_working_task_streams_its_answer_in_chunks(serving: Serving) -> None:
    async with serving(await a2a_client(), token=TOKEN) as url, httpx.AsyncClient(timeout=30) as http:
        immediately = {"configuration": {"returnImmediately": True}}
        started = await rpc(http, url, "SendMessage", {**message("go slow"), **immediately})
        task_id = started["result"]["task"]["id"]
        followed = await sse_results(http, url, "SubscribeToTask", {"id": task_id})  # the lookup takes a second
        assert followed[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert streamed_answer(followed) == "done: facts about tides" and len(flags(followed)) > 1
        got = await rpc(http, url, "GetTask", {"id": task_id})
        assert got["result"]["artifacts"][0]["parts"] == [{"text": "done: facts about tides"}]


async def test_only_the_last_model_calls_text_is_the_answer_artifact(serving: Serving) -> None:
    @tool
    async def look(topic: str) -> str:
        """Look a topic up."""
        return f"facts about {topic}"

    def reply(request: ModelRequest) -> AssistantMessage:
        if isinstance(request.messages[-1], ToolMessage):
            return AssistantMessage(f"Found {request.messages[-1].content}.")
        return asks(call("l1", "look", topic="tides"), text="Let me look that up first.")

    client = await create_agent(ScriptedModel([reply], repeat_last=True), tools=[look])
    async with serving(client, token=TOKEN) as url, httpx.AsyncClient(timeout=30) as http:
        results = await sse_results(http, url, "SendStreamingMessage", message("tides?"))
        task_id = results[0]["task"]["id"]
        assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert streamed_answer(results) == "Found facts about tides."
        # the first model call's words started the artifact; the second call's first delta started it again
        assert [append for append, _ in flags(results)].count(False) == 2
        got = await rpc(http, url, "GetTask", {"id": task_id})
        assert got["result"]["artifacts"][0]["parts"] == [{"text": "Found facts about tides."}]

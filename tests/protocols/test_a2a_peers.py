"""A2A through the peers' own tools: ``a2a-lint``'s live probe and the Python ``a2a-sdk`` client, on each host."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import httpx
import pytest
import trio

from tests.protocols.a2a_agent import DEPLOYS, a2a_client
from tests.server.support import Serving

TOKEN = "s3cret"


async def test_a2a_lint_live_probe_finds_no_error(serving: Serving) -> None:
    lint = Path(sys.executable).parent / "a2a-lint"
    if not lint.exists() and shutil.which("a2a-lint") is None:
        pytest.skip("a2a-lint is not installed (setup.cfg's test extra pins it; run scripts/test)")
    async with serving(await a2a_client()) as url:
        done = await trio.run_process([str(lint), url, "--live", "--json"], capture_stdout=True, check=False)
    report = json.loads(done.stdout)
    errors = [finding for finding in report["findings"] if finding["level"] == "error"]
    assert errors == [], errors
    assert report["ok"] and report["liveRoundTripMs"] >= 0 and report["streamEvents"] >= 2


async def test_the_python_sdk_client_approves_declines_cancels_and_steers(serving: Serving) -> None:
    sdk = pytest.importorskip("a2a.client", reason="a2a-sdk is not installed (setup.cfg's test extra pins it)")
    from a2a.types import a2a_pb2 as a2a

    DEPLOYS.clear()
    async with serving(await a2a_client(), token=TOKEN) as url:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        client = await sdk.create_client(url, sdk.ClientConfig(streaming=False, httpx_client=http))

        async def send(text: str = "", data: dict[str, object] | None = None, task_id: str = "") -> a2a.Task:
            message = a2a.Message(message_id="m", role=a2a.Role.ROLE_USER, task_id=task_id)
            if text:
                message.parts.append(a2a.Part(text=text))
            if data is not None:
                part = a2a.Part()
                part.data.struct_value.update(data)
                message.parts.append(part)
            responses = [r async for r in client.send_message(a2a.SendMessageRequest(message=message))]
            return responses[-1].task

        asked = await send("please deploy")
        assert asked.status.state == a2a.TaskState.TASK_STATE_INPUT_REQUIRED
        done = await send(data={"approved": True}, task_id=asked.id)
        assert done.status.state == a2a.TaskState.TASK_STATE_COMPLETED
        assert done.artifacts[0].parts[0].text == "done: deployed to staging"
        asked = await send("deploy once more")
        declined = await send(data={"approved": False, "reason": "not today"}, task_id=asked.id)
        assert declined.status.state == a2a.TaskState.TASK_STATE_COMPLETED and DEPLOYS == ["staging"]
        waiting = await send("ask me")
        cancelled = await client.cancel_task(a2a.CancelTaskRequest(id=waiting.id))
        assert cancelled.status.state == a2a.TaskState.TASK_STATE_CANCELED
        with pytest.raises(Exception, match="cannot be canceled"):
            await client.cancel_task(a2a.CancelTaskRequest(id=waiting.id))
        await client.close()

        streaming = await sdk.create_client(url, sdk.ClientConfig(streaming=True, httpx_client=http))
        slow = a2a.Message(message_id="s", role=a2a.Role.ROLE_USER, parts=[a2a.Part(text="go slow")])
        stream = streaming.send_message(a2a.SendMessageRequest(message=slow))
        first = await anext(stream)
        steer = a2a.Message(
            message_id="t", role=a2a.Role.ROLE_USER, task_id=first.task.id, parts=[a2a.Part(text="moon instead")]
        )
        steered = [r async for r in streaming.send_message(a2a.SendMessageRequest(message=steer))]
        rest = [r async for r in stream]
        assert steered[-1].status_update.status.state == a2a.TaskState.TASK_STATE_COMPLETED
        assert rest[-1].status_update.status.state == a2a.TaskState.TASK_STATE_COMPLETED
        from a2a.server.tasks.task_manager import append_artifact_to_task

        task = first.task
        for response in rest:
            if response.HasField("artifact_update"):
                append_artifact_to_task(task, response.artifact_update)  # the SDK's own reassembly
        assert "".join(part.text for part in task.artifacts[0].parts) == "steered: moon instead"
        await streaming.close()
        await http.aclose()


async def test_the_a2a_proof_contract_holds(serving: Serving) -> None:
    proof = Path(sys.executable).parent / "a2a-proof"
    if not proof.exists():
        pytest.skip("a2a-proof is not installed (setup.cfg's test extra pins it; run scripts/test)")
    contract = Path(__file__).parent / "contracts" / "a2a-proof.yaml"
    async with serving(await a2a_client(), token=TOKEN) as url:
        env = {**os.environ, "A2A_URL": url, "A2A_TOKEN": TOKEN}
        done = await trio.run_process(
            [str(proof), "run", str(contract), "--format", "json"], capture_stdout=True, check=False, env=env
        )
    report = json.loads(done.stdout)
    assert done.returncode == 0, json.dumps(report, indent=1)[:4000]


A2A_JS = Path(__file__).parent / "a2a_js"


async def test_the_js_sdk_client_approves_declines_cancels_and_steers(serving: Serving) -> None:
    node = shutil.which("node")
    if node is None or not (A2A_JS / "node_modules" / "@a2a-js" / "sdk").is_dir():
        pytest.skip("node or @a2a-js/sdk is missing (scripts/test installs it with npm ci in tests/protocols/a2a_js)")
    DEPLOYS.clear()
    async with serving(await a2a_client(), token=TOKEN) as url:
        done = await trio.run_process(
            [node, str(A2A_JS / "cycles.mjs"), url, TOKEN], capture_stdout=True, capture_stderr=True, check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    completed, input_required, canceled = 3, 6, 5  # the SDK's TaskState values
    assert report["approveAsked"] == [input_required, "tool_approval"]
    assert report["approved"] == [completed, "done: deployed to staging"]
    assert report["declined"] == [completed, "done: rejected: the user declined deploy: not today"]
    assert report["cancelAsked"] == [input_required, [{"answer": "red"}, {"answer": "blue"}]]
    assert report["cancelled"] == canceled
    assert "has ended (cancelled)" in report["refused"]
    assert report["steered"] == [completed, "steered: moon instead"]
    assert DEPLOYS == ["staging"]

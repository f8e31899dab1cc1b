"""A2A on a web node whose runs a worker carries (one SQLite run store): the same cycles as on one process."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.store.runs_sql import sqlite_run_store
from tests.protocols.a2a_agent import DEPLOYS, a2a_client
from tests.server.support import serving


@asynccontextmanager
async def web_node(tmp_path: Path, **settings: Any) -> AsyncIterator[str]:
    path = str(tmp_path / "cluster.db")
    worker = Worker(await a2a_client(), sqlite_run_store(path), name="w", poll_seconds=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        async with serving(StoreBackend(sqlite_run_store(path), poll_seconds=0.02), **settings) as base:  # type: ignore[arg-type]
            yield base
        nursery.cancel_scope.cancel()


async def rpc(http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = await http.post(f"{url}/a2a", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def message(text: str | None = None, data: dict[str, Any] | None = None, **ids: str) -> dict[str, Any]:
    parts = [{"text": text}] if text is not None else [{"data": data}]
    return {"message": {"messageId": "m", "role": "ROLE_USER", "parts": parts, **ids}}


async def test_approve_decline_and_cancel_on_a_web_node(tmp_path: Path) -> None:
    DEPLOYS.clear()
    with trio.fail_after(60):
        async with web_node(tmp_path) as url, httpx.AsyncClient(timeout=30) as http:
            asked = (await rpc(http, url, "SendMessage", message("please deploy")))["result"]["task"]
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
            wrong = await rpc(http, url, "SendMessage", message(data={"approved": 3}, taskId=asked["id"]))
            assert wrong["error"]["code"] == -32602, wrong
            done = (await rpc(http, url, "SendMessage", message(data={"approved": True}, taskId=asked["id"])))["result"]
            assert done["task"]["status"]["state"] == "TASK_STATE_COMPLETED", done
            assert done["task"]["artifacts"][0]["parts"] == [{"text": "done: deployed to staging"}]
            again = (await rpc(http, url, "SendMessage", message("deploy again")))["result"]["task"]
            declined = await rpc(http, url, "SendMessage", message(data={"approved": False}, taskId=again["id"]))
            assert declined["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            waiting = (await rpc(http, url, "SendMessage", message("ask me")))["result"]["task"]
            assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            cancelled = (await rpc(http, url, "CancelTask", {"id": waiting["id"]}))["result"]
            assert cancelled["status"]["state"] == "TASK_STATE_CANCELED", cancelled
    assert DEPLOYS == ["staging"]


async def test_a_message_on_a_working_task_steers_it_on_a_web_node(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with web_node(tmp_path) as url, httpx.AsyncClient(timeout=30) as http:
            params = {**message("go slow"), "configuration": {"returnImmediately": True}}
            started = (await rpc(http, url, "SendMessage", params))["result"]["task"]
            while (await rpc(http, url, "GetTask", {"id": started["id"]}))["result"]["status"][
                "state"
            ] != "TASK_STATE_WORKING":
                await trio.sleep(0.02)
            steered = await rpc(http, url, "SendMessage", message("moon instead", taskId=started["id"]))
            task = steered["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            assert task["artifacts"][0]["parts"] == [{"text": "steered: moon instead"}]


async def test_the_a2a_proof_contract_holds_on_a_web_node(tmp_path: Path) -> None:
    proof = Path(sys.executable).parent / "a2a-proof"
    if not proof.exists():
        pytest.skip("a2a-proof is not installed (setup.cfg's test extra pins it; run scripts/test)")
    contract = Path(__file__).parent / "contracts" / "a2a-proof.yaml"
    with trio.fail_after(120):
        async with web_node(tmp_path, token="s3cret") as url:
            env = {**os.environ, "A2A_URL": url, "A2A_TOKEN": "s3cret"}
            done = await trio.run_process(
                [str(proof), "run", str(contract), "--format", "json"], capture_stdout=True, check=False, env=env
            )
    assert done.returncode == 0, json.dumps(json.loads(done.stdout), indent=1)[:4000]


async def test_the_js_sdk_client_cycles_on_a_web_node(tmp_path: Path) -> None:
    a2a_js = Path(__file__).parent / "a2a_js"
    node = shutil.which("node")
    if node is None or not (a2a_js / "node_modules" / "@a2a-js" / "sdk").is_dir():
        pytest.skip("node or @a2a-js/sdk is missing (scripts/test installs it with npm ci in tests/protocols/a2a_js)")
    DEPLOYS.clear()
    with trio.fail_after(120):
        async with web_node(tmp_path, token="s3cret") as url:
            done = await trio.run_process(
                [node, str(a2a_js / "cycles.mjs"), url, "s3cret"], capture_stdout=True, capture_stderr=True, check=False
            )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["approved"] == [3, "done: deployed to staging"]
    assert report["declined"] == [3, "done: rejected: the user declined deploy: not today"]
    assert report["cancelled"] == 5
    assert report["steered"] == [3, "steered: moon instead"]
    assert DEPLOYS == ["staging"]

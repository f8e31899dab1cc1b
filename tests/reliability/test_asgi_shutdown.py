"""Open event streams end, with a last ``event: closing`` frame, when uvicorn shuts down or the host closes.

Without it uvicorn's Ctrl-C waits for every open stream, and a stream of a run that waits for an
approval never ends by itself.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import ScriptedModel, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.host import AgentHost
from orchestrator.server import create_app
from tests.doc_examples import uvicorn_serving, write_programs
from tests.server.support import UvicornThread
from tests.support import asks, call


class StreamReader(threading.Thread):
    """Reads one SSE stream to its end: its frames, and when it ended."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.frames: list[dict[str, str]] = []
        self.ended_at: float | None = None
        self.question = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", self.url, timeout=60) as response:
                current: dict[str, str] = {}
                for line in response.iter_lines():
                    if not line:
                        self.frames.append(current)
                        if current.get("event") == "ask_user":
                            self.question.set()
                        current = {}
                        continue
                    field, _, value = line.partition(": ")
                    current[field] = value
        except BaseException as error:  # reported by the test
            self.error = error
        self.ended_at = time.monotonic()


def _started(base: str, path: str, body: dict[str, Any]) -> str:
    response = httpx.post(f"{base}{path}", json=body, timeout=10)
    assert response.status_code == 202, response.text
    request_id: str = response.json()["request_id"]
    return request_id


def _closing(reader: StreamReader) -> dict[str, Any]:
    assert reader.error is None, reader.error
    last = reader.frames[-1]
    assert last["event"] == "closing" and "id" not in last, reader.frames[-3:]
    data: dict[str, Any] = json.loads(last["data"])
    return data


def test_ctrl_c_on_uvicorn_ends_the_open_streams_of_a_waiting_run_and_the_server_exits(tmp_path: Path) -> None:
    write_programs("asyncio.md", tmp_path)
    with uvicorn_serving(tmp_path, "approvals:app") as (base, process):
        request_id = _started(base, "/deploys/d1", {"service": "web"})
        paths = [f"/agent/runs/{request_id}/events", f"/deploys/{request_id}/events"]  # the service's, the app's own
        readers = [StreamReader(f"{base}{path}") for path in paths]
        for reader in readers:
            reader.start()
        for reader in readers:
            assert reader.question.wait(10), "the run did not reach its question"
        asked = time.monotonic()
        process.send_signal(signal.SIGINT)
        for reader in readers:
            reader.join(5)
            assert reader.ended_at is not None, f"{reader.url} was still open 5 s after Ctrl-C"
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            pytest.fail("uvicorn did not exit within 10 s of Ctrl-C")
    for reader in readers:
        assert _closing(reader) == {"type": "closing", "reason": "the server is shutting down"}
        assert reader.ended_at is not None and reader.ended_at - asked < 5


@pytest.fixture
def waiting_host() -> Iterator[AgentHost]:
    model = ScriptedModel([asks(call("q1", "ask_user", question="Deploy?", options=["yes", "no"]))])
    host = AgentHost(lambda: create_agent(model, extensions=[AskUserExtension()]))
    try:
        yield host
    finally:
        host.close()


async def test_closing_the_host_ends_its_open_streams_with_the_reason(waiting_host: AgentHost) -> None:
    server = UvicornThread(create_app(waiting_host))
    base = await trio.to_thread.run_sync(server.start)
    try:
        request_id = _started(base, "/sessions/s/runs", {"input": "deploy"})
        reader = StreamReader(f"{base}/runs/{request_id}/events")
        reader.start()
        assert await trio.to_thread.run_sync(reader.question.wait, 10), "the run did not reach its question"
        await trio.to_thread.run_sync(waiting_host.close)
        await trio.to_thread.run_sync(reader.join, 5)
        assert reader.ended_at is not None, "the stream was still open 5 s after the host closed"
    finally:
        await trio.to_thread.run_sync(server.stop)
    assert _closing(reader)["reason"].startswith("the agent host is")


def test_ctrl_c_on_serve_ends_the_open_stream_of_a_waiting_run_with_the_reason() -> None:
    command = [
        sys.executable, "-m", "orchestrator", "serve", "--app", "tests.cluster.apps:approval_agent",
        "--host", "127.0.0.1", "--port", "0", "--no-token",
    ]  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(command, cwd=root, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert process.stderr is not None
        announced = re.search(r"serving on (http://127\.0\.0\.1:\d+)", process.stderr.readline())
        assert announced is not None, "serve did not announce its address"
        base = announced[1]
        request_id = _started(base, "/sessions/s/runs", {"input": "deploy"})
        reader = StreamReader(f"{base}/runs/{request_id}/events")
        reader.start()
        assert reader.question.wait(10), "the run did not reach its question"
        asked = time.monotonic()
        process.send_signal(signal.SIGINT)
        reader.join(5)
        assert reader.ended_at is not None, "the stream was still open 5 s after Ctrl-C"
        assert process.wait(10) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert _closing(reader) == {"type": "closing", "reason": "the server is shutting down"}
    assert reader.ended_at - asked < 5

"""SIGTERM drains ``serve``: new runs get 503 with Retry-After, a run that works finishes its step, then open
streams end with ``event: closing`` and the server exits 0."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.reliability.test_asgi_shutdown import StreamReader, _closing, _started


def test_sigterm_on_serve_refuses_new_runs_lets_the_working_run_finish_its_step_and_exits_0(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "orchestrator", "serve", "--app", "tests.cluster.apps:approval_agent",
        "--host", "127.0.0.1", "--port", "0", "--no-token", "--grace-seconds", "20",
    ]  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "ORCHESTRATOR_TEST_MARKS": str(tmp_path)}
    process = subprocess.Popen(command, cwd=root, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        assert process.stderr is not None
        announced = re.search(r"serving on (http://127\.0\.0\.1:\d+)", process.stderr.readline())
        assert announced is not None, "serve did not announce its address"
        base = announced[1]
        request_id = _started(base, "/sessions/s/runs", {"input": "slow job"})
        reader = StreamReader(f"{base}/runs/{request_id}/events")
        reader.start()
        deadline = time.monotonic() + 10
        while not (tmp_path / "record.log").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "record.log").exists(), "the slow call did not start"
        process.send_signal(signal.SIGTERM)
        assert "draining" in process.stderr.readline()
        refused = httpx.post(f"{base}/sessions/other/runs", json={"input": "hi"}, timeout=10)
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "5"
        assert refused.json()["error"]["type"] == "Draining"
        reader.join(15)
        assert reader.ended_at is not None, "the stream was still open 15 s after SIGTERM"
        assert process.wait(10) == 0
        assert "drained after SIGTERM" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert _closing(reader) == {"type": "closing", "reason": "the server is shutting down"}
    kinds = [frame.get("event") for frame in reader.frames]
    # The slow call finished before the server stopped, and the run reached its question.
    completed = [json.loads(f["data"])["call"]["name"] for f in reader.frames if f.get("event") == "tool_completed"]
    assert "record" in completed and "ask_user" in kinds, kinds
    assert (tmp_path / "record.log").read_text().splitlines() == ["slow job"]

"""docs/durability/scaling.md's FastAPI application (example: carrying-fastapi) serves and carries runs.

Its ``main.py`` and the page's ``agents.py`` run under ``uvicorn main:app --workers 2`` with no worker
process: a run started under ``/agents`` asks for approval, is approved, and completes; the application's
own route answers beside it. uvicorn is stopped with SIGINT, which runs the lifespan's drain.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.doc_examples import environment, free_port, program, pytest_skip_unless_installed, run_events

PAGE = "durability/scaling.md"


def test_a_fastapi_application_carries_the_runs_of_the_web_node_it_mounts(tmp_path: Path) -> None:
    pytest_skip_unless_installed()
    (tmp_path / "agents.py").write_text(program(PAGE, "agents.py"))
    (tmp_path / "main.py").write_text(program(PAGE, "main.py"))
    port = free_port()
    log = tmp_path / "uvicorn.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "main:app", "--workers", "2", "--port", str(port)],
            cwd=tmp_path,
            env=environment(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            deadline = time.monotonic() + 60
            while log.read_text().count("Application startup complete") < 2:
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            assert http.get("/").json() == {"service": "support", "agents": "/agents"}
            http.headers["Authorization"] = "Bearer try-it"
            started = http.post("/agents/sessions/s1/runs", json={"input": "refund 42"})
            assert started.status_code == 202, started.text
            request_id = started.json()["request_id"]
            asked = run_events(http, f"/agents/runs/{request_id}/events", stop="tool_approval")
            assert asked[-1]["type"] == "tool_approval", [e["type"] for e in asked]
            answer = {"name": "tool_approval_response", "payload": {"tool_call_id": "c1", "approved": True}}
            answered = http.post("/agents/sessions/s1/events", json=answer)
            assert answered.status_code == 202, answered.text
            done = run_events(http, f"/agents/runs/{request_id}/events", stop="run_completed")
            assert done[-1]["type"] == "run_completed", [e["type"] for e in done]
            assert done[-1]["result"]["content"] == "Done: order 42 refunded."
            assert http.get(f"/agents/runs/{request_id}").json()["done"] is True
        server.send_signal(signal.SIGINT)
        assert server.wait(30) == 0, log.read_text()
        assert log.read_text().count("Application shutdown complete") == 2, log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

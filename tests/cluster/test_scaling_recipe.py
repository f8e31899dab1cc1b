"""docs/durability/scaling.md's "Try it on one machine" (example: scaling-recipe) runs as written.

The page's blocks are run as they stand: ``postgres.sh`` starts a throwaway PostgreSQL,
``worker.sh`` and ``web.sh`` start one worker and the web node under uvicorn (two processes)
from the directory that holds ``agents.py``. The test then starts a run over HTTP, approves
its refund, reads its events to the end, and stops everything it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.doc_examples import ROOT, free_port, page_blocks, run_events
from tests.pg import _bin_dir

PAGE = "durability/scaling.md"


def block(name: str) -> str:
    return next(text for title, text in page_blocks(PAGE) if title == name)


@pytest.fixture
def recipe(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if _bin_dir() is None or not Path("/usr/lib/postgresql").is_dir():
        pytest.skip("no PostgreSQL binaries under /usr/lib/postgresql (Debian's postgresql package)")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: the recipe's initdb cannot run as 'postgres'")
    (tmp_path / "agents.py").write_text(block("agents.py"))
    web_port = free_port()
    script = "\n".join(
        [
            "set -e",
            block("postgres.sh"),
            f'echo "$PGDATA" > {tmp_path}/pgdata',
            f"({block('worker.sh').strip()}) > {tmp_path}/worker.log 2>&1 &",
            f"({block('web.sh').strip()}) > {tmp_path}/web.log 2>&1 &",
            "wait",
        ]
    )
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PGPORT": str(free_port()),
        "WEB_PORT": str(web_port),
    }
    shell = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{web_port}", tmp_path
    finally:
        os.killpg(shell.pid, signal.SIGTERM)
        try:
            shell.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, signal.SIGKILL)
        pgdata = tmp_path / "pgdata"
        if pgdata.exists():
            data = pgdata.read_text().strip()
            bin_dir = _bin_dir()
            stop = [str(bin_dir / "pg_ctl"), "-D", data, "stop", "-m", "immediate"]
            as_server = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
            subprocess.run([*as_server, *stop], capture_output=True, timeout=30)
            shutil.rmtree(data, ignore_errors=True)


def logs(directory: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(directory.glob("*.log")))


def test_the_scaling_recipe_runs_as_written(recipe: tuple[str, Path]) -> None:
    base, directory = recipe
    auth = {"Authorization": "Bearer try-it"}
    deadline = time.monotonic() + 90
    with httpx.Client(base_url=base, timeout=10, headers=auth) as http:
        while True:  # PostgreSQL, the worker and both web processes starting
            try:
                if http.get("/health").status_code == 200 and "carrying runs" in logs(directory):
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the recipe did not start:\n{logs(directory)}"
            time.sleep(0.2)
        started = http.post("/sessions/s1/runs", json={"input": "refund 42"})
        assert started.status_code == 202, started.text
        request_id = started.json()["request_id"]
        events: list[dict[str, Any]] = []
        while not any(e["type"] == "tool_approval" for e in events):
            events = run_events(http, f"/runs/{request_id}/events", stop="tool_approval")
        answer = {"name": "tool_approval_response", "payload": {"tool_call_id": "c1", "approved": True}}
        answered = http.post("/sessions/s1/events", json=answer)
        assert answered.status_code == 202, answered.text
        events = run_events(http, f"/runs/{request_id}/events", stop="run_completed")
    assert events[-1]["type"] == "run_completed", [e["type"] for e in events]
    assert events[-1]["result"]["content"] == "Done: order 42 refunded.", logs(directory)

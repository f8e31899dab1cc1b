"""``serve`` that carries runs ends when its HTTP server ends, however it ended: the process never stays on
as a headless worker (hypercorn takes a KeyboardInterrupt raised in its own code for a shutdown of its own
and returns as if it had been asked to stop)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SERVER_ENDS_BY_ITSELF = """
import sys
import hypercorn.trio

async def ends_once_ready(app, config, *, shutdown_trigger=None, task_status=None):
    task_status.started(["http://127.0.0.1:1"])  # ready, then over, as after an interrupt it swallowed

hypercorn.trio.serve = ends_once_ready
sys.argv = ["orchestrator", "serve", "--port", "0", "--db", sys.argv[1], "--app", "bench.cluster_app:approval_agent"]
from orchestrator.__main__ import run_as_script
run_as_script()
"""


def test_serve_carrying_runs_ends_when_its_server_does(tmp_path: Path) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", SERVER_ENDS_BY_ITSELF, f"sqlite:///{tmp_path / 'runs.db'}"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired as stuck:
        raise AssertionError(f"serve stayed on after its server ended: {stuck.stderr!r}") from None
    assert done.returncode == 0, done.stderr
    assert "serving on http://127.0.0.1:1" in done.stderr

"""The programs of docs/asyncio.md run as written and print what the page shows; the FastAPI app under uvicorn.

The page's servers and their client are run here (example: asyncio-hello-app, example: asyncio-approvals,
example: asyncio-client), under uvicorn on a free loopback port; so is its program whose own tool and hook
run on the application's loop (example: asyncio-app-loop).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.doc_examples import environment, output_after, uvicorn_serving, write_programs

PAGE = "asyncio.md"


def test_frames_prints_what_the_page_shows(tmp_path: Path) -> None:
    write_programs(PAGE, tmp_path)
    env = environment(tmp_path)
    command = [sys.executable, "frames.py"]
    ran = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == output_after(PAGE, "frames.py")


def test_app_loop_example_runs_its_tool_and_hook_on_its_loop_as_the_page_shows(tmp_path: Path) -> None:
    write_programs(PAGE, tmp_path)
    command = [sys.executable, "app_loop.py"]
    ran = subprocess.run(command, cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == output_after(PAGE, "app_loop.py")


def test_the_fastapi_example_under_uvicorn_answers_the_client_as_the_page_shows(tmp_path: Path) -> None:
    write_programs(PAGE, tmp_path)
    with uvicorn_serving(tmp_path, "approvals:app") as (base, _process):
        env = {**environment(tmp_path), "APPROVALS_URL": base}
        command = [sys.executable, "client.py"]
        ran = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == output_after(PAGE, "client.py")


def test_hello_app_serves_a_run_under_uvicorn(tmp_path: Path) -> None:
    write_programs(PAGE, tmp_path)
    with uvicorn_serving(tmp_path, "hello_app:app", health="/health") as (base, _process):
        started = httpx.post(f"{base}/sessions/s1/runs", json={"input": "hi"}, timeout=10)
        assert started.status_code == 202, started.text
        stream = httpx.get(f"{base}{started.json()['events']}", timeout=10)
    assert stream.status_code == 200
    assert stream.text.rstrip().split("\n\n")[-1].splitlines()[1] == "event: run_completed"
    assert '"content":"hello"' in stream.text

"""The programs of a docs page (```python title="NAME"``` blocks) and the output they show (title="output")."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.S | re.M)


def page_blocks(page: str) -> list[tuple[str, str]]:
    """(title, text) of each titled block of ``docs/PAGE``, in order."""
    text = (ROOT / "docs" / page).read_text()
    return [(title, body) for _, title, body in BLOCK.findall(text)]


def program(page: str, name: str) -> str:
    return next(body for title, body in page_blocks(page) if title == name)


def output_after(page: str, name: str) -> str:
    """The output block that follows the program ``name`` (its next one, before another program)."""
    blocks = page_blocks(page)
    index = next(i for i, (title, _) in enumerate(blocks) if title == name)
    for title, body in blocks[index + 1 :]:
        if title == "output":
            return body
    raise LookupError(f"no output block after {name}")


def write_programs(page: str, directory: Path) -> None:
    for title, body in page_blocks(page):
        if title.endswith(".py"):
            (directory / title).write_text(body)


def environment(directory: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(directory), str(ROOT)])
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def uvicorn_serving(
    directory: Path, app: str, health: str = "/agent/health"
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``uvicorn APP`` run in ``directory`` on a loopback port, once ``health`` answers: its base URL and process."""
    pytest_skip_unless_installed()
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=directory,
        env=environment(directory),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"uvicorn exited: {process.stdout.read() if process.stdout else ''}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}{health}", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not answer within 30 s")
            time.sleep(0.1)
        yield base, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def pytest_skip_unless_installed() -> None:
    import pytest

    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e '.[test]')")
    pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install -e '.[test]')")


def run_events(http: httpx.Client, path: str, stop: str) -> list[dict[str, Any]]:
    """The events (JSON) of the SSE stream at ``path``, up to and including the first of type ``stop``."""
    found: list[dict[str, Any]] = []
    with http.stream("GET", path) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                found.append(json.loads(line.removeprefix("data: ")))
                if found[-1]["type"] == stop:
                    break
    return found

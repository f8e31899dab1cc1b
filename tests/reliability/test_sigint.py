"""Ctrl-C (SIGINT) ends ``serve`` and ``worker`` with one line and exit code 130, never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 60.0


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _interrupt_when_ready(process: subprocess.Popen[str], ready: str) -> tuple[int, str]:
    """Wait for the line containing ``ready``, send SIGINT, and return the exit code and all of stderr."""
    assert process.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + START_SECONDS
    try:
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            seen.append(line)
            if ready in line:
                break
        assert any(ready in line for line in seen), "".join(seen)
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, "".join(seen) + rest


def _assert_interrupted(code: int, stderr: str, command: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert "ExceptionGroup" not in stderr, stderr
    assert code == 130, stderr
    assert stderr.rstrip().splitlines()[-1].startswith(f"{command}: interrupted"), stderr


def test_sigint_stops_serve_with_one_line_and_130(tmp_path: Path) -> None:
    process = _start("serve", "--port", "0", "--db", str(tmp_path / "sessions.db"), "--root", str(tmp_path))
    code, stderr = _interrupt_when_ready(process, "serving on")
    _assert_interrupted(code, stderr, "serve")


def test_sigint_stops_a_web_node_with_one_line_and_130(tmp_path: Path) -> None:
    process = _start("serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 'runs.db'}")
    code, stderr = _interrupt_when_ready(process, "serving on")
    _assert_interrupted(code, stderr, "serve")


def test_sigint_stops_worker_with_one_line_and_130(tmp_path: Path) -> None:
    process = _start("worker", "--db", f"sqlite:///{tmp_path / 'runs.db'}", "--root", str(tmp_path))
    code, stderr = _interrupt_when_ready(process, "carrying runs")
    _assert_interrupted(code, stderr, "worker")


def test_sigint_stops_worker_on_postgresql_with_one_line_and_130(postgres_dsn: str, tmp_path: Path) -> None:
    process = _start("worker", "--db", postgres_dsn, "--root", str(tmp_path))
    code, stderr = _interrupt_when_ready(process, "carrying runs")
    _assert_interrupted(code, stderr, "worker")


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_sigint_while_starting_ends_quietly_too(command: str, tmp_path: Path) -> None:
    """A Ctrl-C that arrives before the command is ready (while it loads its app and opens its store).

    A Ctrl-C that arrives while Python itself is still starting is Python's to report: before its
    signal handlers are installed the process is killed by SIGINT with nothing said, and while it
    imports the package ``<frozen runpy>`` is on the traceback (before any of the command's code
    runs). On a busy machine 0.3 s can fall in those windows, so the press is sent again later in a
    new process.
    """
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    for delay in (0.3, 1.0, 2.0):
        process = _start(command, "--port", "0", "--db", db) if command == "serve" else _start(command, "--db", db)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        before_python = process.returncode == -signal.SIGINT and not stderr.strip()
        if "<frozen runpy>" not in stderr and not before_python:
            break
    assert "Traceback" not in stderr, stderr
    assert process.returncode == 130, stderr

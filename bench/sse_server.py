"""The service in a process of its own, on the loopback interface, with its CPU time readable.

``ServerProcess(shape)`` runs ``python -m orchestrator serve --app
bench.sse_app:agent --host 127.0.0.1 --port 0`` (hypercorn's trio worker), or with
``server="uvicorn"`` ``uvicorn bench.sse_asgi_app:app`` (the agent in an
AgentHost), and waits until it announces its address; with ``floor`` (a recorded
``bench.sse_floor.Traffic`` file) it serves the raw ASGI app ``bench.sse_floor_app:app`` instead, on
uvicorn or on hypercorn's trio worker (the listen backlog ``serve`` uses). ``cpu_seconds()`` reads the
process's user + system time from ``/proc/PID/stat``. Leaving the context stops the process (SIGINT, then kill).
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from bench.sse_app import ENVIRONMENT, Shape

FLOOR_ENVIRONMENT = "BENCH_SSE_FLOOR"

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
ANNOUNCED = re.compile(r"(?:serving on|Uvicorn running on|Running on) (http://127\.0\.0\.1:\d+)")
#: The listen backlog of ``python -m orchestrator serve`` (its default), kept by the floor on hypercorn.
SERVE_BACKLOG = 1024
SERVERS = ("hypercorn", "uvicorn")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ServerFailed(RuntimeError):
    """The server did not start, or died; the message holds the end of its stderr."""


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (every thread), from /proc (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        text = stat.read()
    fields = text[text.rindex(")") + 2 :].split()
    # After the command name: state is field 3 of the whole line, utime 14 and stime 15.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def raise_fd_limit(needed: int) -> str | None:
    """Raise this process's soft file-descriptor limit to ``needed`` (children inherit it).

    Returns a sentence saying what was raised, or None when the limit already sufficed.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return None
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return f"file-descriptor limit raised from {soft} to {target}"


class ServerProcess:
    """The service of the shaped scripted agent on ``server`` (hypercorn or uvicorn), bound to 127.0.0.1 only."""

    def __init__(
        self, shape: Shape, *, server: str = "hypercorn", startup_timeout: float = 60.0, floor: Path | None = None
    ) -> None:
        if server not in SERVERS:
            raise ValueError(f"server must be one of {SERVERS}, not {server!r}")
        self.server = server
        self.shape = shape
        self.startup_timeout = startup_timeout
        self.floor = floor
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._workspace = tempfile.TemporaryDirectory(prefix="bench-sse-")

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)

    def _stderr_text(self) -> str:
        assert self._stderr is not None
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def _command(self) -> list[str]:
        if self.floor is not None and self.server == "hypercorn":
            return [
                sys.executable,
                "-m",
                "hypercorn",
                "--worker-class",
                "trio",
                "--workers",
                "0",  # served in this process (CPU read from its pid), as ``serve`` does; 1 forks a worker
                "--bind",
                f"{LOOPBACK}:0",
                "--backlog",
                str(SERVE_BACKLOG),
                "--error-logfile",
                "-",
                "bench.sse_floor_app:app",
            ]
        if self.server == "uvicorn":
            return [
                sys.executable,
                "-m",
                "uvicorn",
                "bench.sse_floor_app:app" if self.floor is not None else "bench.sse_asgi_app:app",
                "--host",
                LOOPBACK,
                "--port",
                "0",
                "--no-access-log",
                "--log-level",
                "info",
            ]
        return [
            sys.executable,
            "-m",
            "orchestrator",
            "serve",
            "--app",
            "bench.sse_app:agent",
            "--host",
            LOOPBACK,
            "--port",
            "0",
            "--root",
            self._workspace.name,
            "--no-token",
        ]

    def __enter__(self) -> ServerProcess:
        command = self._command()
        environment = {**os.environ, ENVIRONMENT: self.shape.to_json()}
        environment.pop("ORCHESTRATOR_TOKEN", None)
        if self.floor is not None:
            environment[FLOOR_ENVIRONMENT] = str(self.floor)
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=self._stderr
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            found = ANNOUNCED.search(self._stderr_text())
            if found:
                self.url = found.group(1)
                return self
            if self._process.poll() is not None:
                break
            time.sleep(0.05)
        tail = "\n".join(self._stderr_text().strip().splitlines()[-5:])
        self.__exit__()
        raise ServerFailed(f"the server did not announce a loopback address: {tail or 'no output'}")

    def failure(self) -> str | None:
        """Why the server is no longer running, or None while it runs."""
        if self._process is None or self._process.poll() is None:
            return None
        if self._stderr is None:
            return f"the server exited with {self._process.returncode}"
        tail = (self._stderr_text().strip().splitlines() or ["no output"])[-1]
        return f"the server exited with {self._process.returncode}: {tail}"

    def __exit__(self, *exc: object) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._workspace.cleanup()

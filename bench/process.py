"""One benchmark cell in a fresh interpreter, and nothing of it left running after it.

A cell runs in a session of its own: when it outlives its timeout, its whole
process group is killed, servers it started included (a cell killed alone would
leave its server running, its ``finally`` never reached).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_cell_command(command: Sequence[str], timeout: float) -> dict[str, Any]:
    """The JSON object the cell prints on its last line; failures come back as ``{"failed": why}``."""
    process = subprocess.Popen(
        list(command), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        process.communicate()
        return {"failed": f"timed out after {timeout:.0f} s", "pid": process.pid}
    finally:
        _kill_group(process.pid)  # whatever the cell left running in its session
    lines = stdout.strip().splitlines()
    if process.returncode != 0 or not lines:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"failed": f"exit {process.returncode}: {last}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)

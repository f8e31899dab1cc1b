"""The protocols' own JavaScript clients (tests/protocols/clients, pinned in its package-lock.json), run by node."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

CLIENTS = Path(__file__).parent / "clients"


def node_or_skip(package: str) -> str:
    """The node executable, or a skip saying what is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    if not (CLIENTS / "node_modules" / package / "package.json").exists():
        pytest.skip(f"{package} is not installed: run scripts/test (npm ci --prefix {CLIENTS})")
    return node


async def run_client(package: str, script: str, *args: str) -> dict[str, Any]:
    """Run ``script`` of tests/protocols/clients with ``args``; its JSON output (fails with its stderr)."""
    node = node_or_skip(package)
    with trio.fail_after(60):
        done = await trio.run_process(
            [node, str(CLIENTS / script), *args], cwd=CLIENTS, capture_stdout=True, capture_stderr=True, check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    found: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return found

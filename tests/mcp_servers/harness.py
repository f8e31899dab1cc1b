"""Starting the MCP servers the tests use, or skipping with the reason when one is not installed here."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PACKAGES = HERE / "node_modules" / "@modelcontextprotocol"
SDK_SERVER = HERE / "sdk_server.py"
TOKEN = "test-token-7"


def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.skip("node is not installed here: the MCP reference servers from npm cannot run")
    return found


def npm_server(package: str) -> list[str]:
    """The command that starts ``@modelcontextprotocol/<package>``, or a skip saying it is not installed."""
    entry = PACKAGES / package / "dist" / "index.js"
    if not entry.is_file():
        pytest.skip(
            f"@modelcontextprotocol/{package} is not installed in tests/{HERE.name}/node_modules "
            "(README's test command, bash scripts/test, installs it with npm ci)"
        )
    return [node(), str(entry)]


def sdk_stdio() -> list[str]:
    """The command that starts the SDK-built test server over stdio."""
    return [sys.executable, str(SDK_SERVER), "stdio"]


@contextmanager
def sdk_http(port: int = 0, token: str = TOKEN) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The SDK-built test server over streamable HTTP on 127.0.0.1: its URL and its process."""
    process = subprocess.Popen(
        [sys.executable, str(SDK_SERVER), "http", token, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 60)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the SDK test server did not start (said {line!r}, exit code {process.poll()})")
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp", process
    finally:
        process.kill()
        process.wait(10)


def children_running(fragment: str) -> list[int]:
    """Ids of this process's children whose command line contains ``fragment`` (Linux /proc)."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc here: the test cannot find the server's process")
    found: list[int] = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z" and fragment in command:
            found.append(int(entry.name))
    return found


def hostile_stdio(*options: str) -> list[str]:
    """The command that starts the hostile test server over stdio (see hostile_server.py for its options)."""
    return [sys.executable, str(HERE / "hostile_server.py"), *options]

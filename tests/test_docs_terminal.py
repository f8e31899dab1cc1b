"""docs/terminal.md: its files are written and its commands run in a temporary home, in the page's order, and
each command prints what the page shows (ORCHESTRATOR_UPDATE_DOCS=1 writes what they print into the page).

A console block under a marker comment (the chat transcript, which tests/test_cli_terminal.py writes) is
left to its own test."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "terminal.md"
BLOCK = re.compile(r"(?:<!-- file: (?P<file>\S+) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
HOME = "/home/me"


def _run(command: str, home: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "GEMINI_", "XDG_"))}
    env.update(
        HOME=str(home),
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        PYTHONPATH=str(REPO),
        NO_COLOR="1",
    )
    shell = command.replace("python -m orchestrator", f"{sys.executable} -m orchestrator")
    result = subprocess.run(
        ["bash", "-c", f"({shell}) 2>&1"], cwd=home / "shop", env=env, capture_output=True, text=True, timeout=120
    )
    text = result.stdout.replace(str(home), HOME).replace(sys.executable, "python")
    return re.sub(r"-fork-[0-9a-f]{6}", "-fork-a1b2c3", text)


@pytest.fixture
def home() -> Iterator[Path]:
    """A home whose path has the same length on every machine and run: the system prompt names the working
    directory, so the token counts the page shows depend on its length (pytest's own temporary paths grow
    with its run counter)."""
    root = tempfile.mkdtemp(prefix="docs-", dir="/tmp")
    try:
        yield Path(root) / "me"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_page_shows_what_its_commands_print(home: Path) -> None:
    (home / "shop" / ".git").mkdir(parents=True)
    page = PAGE.read_text()
    updated: list[str] = []
    position = 0
    mismatches = []
    for block in BLOCK.finditer(page):
        updated.append(page[position : block.start()])
        position = block.end()
        text = block.group(0)
        if block.group("file"):
            target = home / block.group("file")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.group("body"))
        elif block.group("lang") == "console" and not page[: block.start()].rstrip().endswith("-->"):
            shown = block.group("body")
            commands = [line[2:] for line in shown.splitlines() if line.startswith("$ ")]
            printed = "".join(f"$ {command}\n" + _run(command, home) for command in commands)
            if printed != shown:
                mismatches.append((shown, printed))
            text = f"```console\n{printed}```"
        updated.append(text)
    updated.append(page[position:])
    if os.environ.get("ORCHESTRATOR_UPDATE_DOCS"):
        PAGE.write_text("".join(updated))
        return
    assert not mismatches, "\n\n".join(f"page:\n{shown}\nprinted:\n{printed}" for shown, printed in mismatches)

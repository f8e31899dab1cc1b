"""The "Embedding in a backend" examples of the documentation run as written, in fresh interpreters."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\n```python\n(?P<code>.*?)\n```", re.S)


def examples() -> dict[str, str]:
    """Every named example of README.md and the pages under docs/, by name."""
    found: dict[str, str] = {}
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        found.update({match["name"]: match["code"] for match in EXAMPLE.finditer(text)})
    return found


def run_example(code: str, tmp_path: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout.splitlines()


def test_both_embedding_examples_are_documented() -> None:
    assert {"embed-trio", "embed-asyncio"} <= set(examples())


@pytest.mark.parametrize("name", ["embed-trio", "embed-asyncio"])
def test_the_embedding_example_runs_and_sees_every_event_once(name: str, tmp_path: Path) -> None:
    lines = run_example(examples()[name], tmp_path)
    assert "accepted by: ['AskUserExtension']" in lines
    assert lines[-1] == "answer: Deployed."
    numbered = [line.split(" ", 1) for line in lines if line[:1].isdigit()]
    seqs = [int(seq) for seq, _ in numbered]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap, no repeat
    assert numbered[-1][1] == "run_completed"
    if name == "embed-trio":
        assert lines[0] == "waiting: ask_user Deploy to prod?"
        assert numbered[0][1] != "run_started" and seqs[0] > 1  # resumed after what the first reader saw
    else:
        assert seqs[0] == 1 and "ask_user" in [event for _, event in numbered]

"""The examples of docs/protocols.md run as written, in a fresh interpreter, and print what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "protocols.md"

_EXAMPLE = re.compile(
    r"<!-- example: (?P<name>\w+) -->\n```python\n(?P<code>.*?)\n```\n\nIt prints:\n\n```text\n(?P<output>.*?)\n```",
    re.DOTALL,
)


def examples() -> dict[str, tuple[str, str]]:
    return {m["name"]: (m["code"], m["output"]) for m in _EXAMPLE.finditer(PAGE.read_text())}


def test_the_page_has_its_three_examples() -> None:
    assert sorted(examples()) == ["agui", "agui_subagents", "ai_sdk"]


@pytest.mark.parametrize("name", sorted(examples()))
def test_an_example_prints_what_the_page_shows(name: str, tmp_path: Path) -> None:
    code, output = examples()[name]
    program = tmp_path / f"{name}.py"
    program.write_text(code + "\n")
    ran = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.rstrip("\n") == output

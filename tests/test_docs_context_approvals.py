"""The programs of docs/context.md and docs/approvals.md run and print what the pages show."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
EXAMPLE = re.compile(r"```python\n(?P<code>.*?)\n```\n\nIt prints:\n\n```text\n(?P<output>.*?)\n```", re.DOTALL)


def examples() -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for page in ("context.md", "approvals.md"):
        matches = list(EXAMPLE.finditer((DOCS / page).read_text(encoding="utf-8")))
        assert matches, f"{page} shows no example with its output"
        found += [(f"{page}#{index}", m["code"], m["output"]) for index, m in enumerate(matches, 1)]
    return found


@pytest.mark.parametrize(("name", "code", "output"), examples(), ids=[e[0] for e in examples()])
def test_the_example_prints_what_the_page_shows(name: str, code: str, output: str, tmp_path: Path) -> None:
    program = tmp_path / "example.py"
    program.write_text(code + "\n", encoding="utf-8")
    ran = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.rstrip("\n") == output

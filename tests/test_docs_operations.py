"""The example of docs/operations.md runs as written, in a fresh interpreter, and prints what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "operations.md"

_EXAMPLE = re.compile(
    r"<!-- example: (?P<name>\w+) -->\n```python\n(?P<code>.*?)\n```\n\nIt prints:\n\n```text\n(?P<output>.*?)\n```",
    re.DOTALL,
)


def test_the_drain_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    found = {m["name"]: (m["code"], m["output"]) for m in _EXAMPLE.finditer(PAGE.read_text())}
    assert sorted(found) == ["drain"]
    code, output = found["drain"]
    program = tmp_path / "drain.py"
    program.write_text(code + "\n")
    ran = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.rstrip("\n") == output

"""docs/a2a.md's program prints what the page shows."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "a2a.md"
_EXAMPLE = re.compile(r"```python\n((?:(?!```).)*)```\s*\n\s*prints\s*\n\s*```text\n((?:(?!```).)*)```", re.S)


def test_the_a2a_page_program_prints_what_the_page_shows(tmp_path: pathlib.Path) -> None:
    examples = _EXAMPLE.findall(PAGE.read_text())
    assert len(examples) == 1
    program, expected = examples[0]
    script = tmp_path / "example.py"
    script.write_text(program)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected

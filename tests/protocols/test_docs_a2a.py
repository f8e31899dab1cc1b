"""docs/a2a.md's programs print what the page shows."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "a2a.md"
_EXAMPLE = re.compile(r"```python\n((?:(?!```).)*)```\s*\n\s*prints\s*\n\s*```text\n((?:(?!```).)*)```", re.S)


def test_the_page_has_its_two_programs() -> None:
    assert len(_EXAMPLE.findall(PAGE.read_text())) == 2


@pytest.mark.parametrize("index", [0, 1])
def test_the_a2a_page_program_prints_what_the_page_shows(index: int, tmp_path: pathlib.Path) -> None:
    program, expected = _EXAMPLE.findall(PAGE.read_text())[index]
    script = tmp_path / "example.py"
    script.write_text(program)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected

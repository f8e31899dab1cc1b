"""The runnable programs of the feature pages under docs/ print what the pages say they print.

Each ```python block of a page is a complete program; the ```text block right after it (after a
line "prints") is its expected output.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = ("tools.md", "model-settings.md", "structured-output.md")
_EXAMPLE = re.compile(r"```python\n((?:(?!```).)*)```\s*\n\s*prints\s*\n\s*```text\n((?:(?!```).)*)```", re.S)


def _examples() -> list[tuple[str, int, str, str]]:
    found: list[tuple[str, int, str, str]] = []
    for page in PAGES:
        path = DOCS / page
        if not path.exists():
            continue
        for index, match in enumerate(_EXAMPLE.finditer(path.read_text())):
            found.append((page, index, match.group(1), match.group(2)))
    return found


@pytest.mark.parametrize(("page", "index", "program", "expected"), _examples(), ids=lambda v: str(v)[:20])
def test_a_page_example_prints_what_the_page_shows(
    page: str, index: int, program: str, expected: str, tmp_path: pathlib.Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(program)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, f"{page} example {index} failed:\n{done.stderr}"
    assert done.stdout == expected


def test_every_page_has_an_example() -> None:
    pages = {page for page, *_ in _examples()}
    assert pages == {page for page in PAGES if (DOCS / page).exists()}
    assert "tools.md" in pages

"""The programs of docs/observability.md run and print what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.prometheus", reason="the otel extra is not installed")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "observability.md"
EXAMPLE = re.compile(r"```python\n(.*?)```\n\nIt prints[^\n]*:\n\n```text\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str]]:
    found = [(program, printed) for program, printed in EXAMPLE.findall(PAGE.read_text())]
    assert len(found) == 4, "the page's examples with their output were not found"
    return found


@pytest.mark.parametrize(("program", "printed"), examples(), ids=["spans", "durable", "metrics", "prometheus"])
def test_the_example_prints_what_the_page_shows(program: str, printed: str) -> None:
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed


def test_the_phoenix_example_builds_its_exporter() -> None:
    programs = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    done = subprocess.run([sys.executable, "-c", programs[-1]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

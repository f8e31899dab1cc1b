"""The last program of docs/observability.md, a fragment for tests/test_docs_examples.py, builds its exporter.

The page's other programs are run, and their output checked, by tests/test_docs_examples.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.otlp", reason="the otel extra is not installed")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "observability.md"


def test_the_phoenix_example_builds_its_exporter() -> None:
    programs = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    done = subprocess.run([sys.executable, "-c", programs[-1]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

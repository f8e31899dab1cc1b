"""A Ctrl-C that lands while generated code runs (``exec`` of a string, as dataclasses and namedtuple do while
a command's modules import) still ends the command with one line and exit status 130, not killed by SIGINT.

CPython remembers an interrupt that escaped code run from a string, even one caught later, and a program run
with ``-m`` (as ``python -m orchestrator`` is) is then killed by SIGINT on its way out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

INTERRUPTED_INSIDE_EXEC = """
import sys
import orchestrator.__main__ as entry

def command(name, args):
    exec("raise KeyboardInterrupt")  # the press arrives while code made from a string runs

entry._command = command
sys.argv = ["orchestrator", "serve"]
entry.run_as_script()
"""


def test_an_interrupt_inside_generated_code_exits_130(tmp_path: Path) -> None:
    (tmp_path / "interrupted_entry").mkdir()
    (tmp_path / "interrupted_entry" / "__main__.py").write_text(INTERRUPTED_INSIDE_EXEC)
    done = subprocess.run(
        [sys.executable, "-m", "interrupted_entry"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stderr.strip() == "serve: interrupted"
    assert done.returncode == 130, f"exit status {done.returncode} (a negative one: killed by that signal)"

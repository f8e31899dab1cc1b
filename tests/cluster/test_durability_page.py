"""docs/durability/index.md's one-process program (example: durability-one-process) runs as written.

The program runs in a fresh interpreter in an empty folder and prints exactly what the page shows; the
SQLite file it leaves holds the run, completed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.store.runs_sql import sqlite_run_store
from tests.doc_examples import environment, output_after, program

PAGE = "durability/index.md"


def test_the_one_process_program_prints_what_the_page_shows(tmp_path: Path) -> None:
    (tmp_path / "refunds.py").write_text(program(PAGE, "refunds.py"))
    command = [sys.executable, "refunds.py"]
    done = subprocess.run(command, cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == output_after(PAGE, "refunds.py")
    store = sqlite_run_store(str(tmp_path / "refunds.db"))
    try:
        [record] = store.runs("s1")
        assert record.status == "completed"
    finally:
        store.close()

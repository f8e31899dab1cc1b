"""The programs of docs/serving/identity.md run as written, in a fresh interpreter, and print what the page shows.

The page's programs: example: identity-two-principals; example: identity-cookie-client, which drives
example: identity-cookie-app.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_examples import environment, output_after, pytest_skip_unless_installed, write_programs

PAGE = "serving/identity.md"


@pytest.mark.parametrize("program", ["two_principals.py", "cookie_client.py"])
def test_a_program_prints_what_the_page_shows(program: str, tmp_path: Path) -> None:
    if program == "cookie_client.py":
        pytest_skip_unless_installed()
    write_programs(PAGE, tmp_path)
    command = [sys.executable, program]
    ran = subprocess.run(command, cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == output_after(PAGE, program)

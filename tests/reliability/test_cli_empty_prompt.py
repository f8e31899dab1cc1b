"""``run`` with an empty or blank prompt is refused in one line with exit 2; nothing is sent to a model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t "])
def test_an_empty_or_blank_prompt_is_refused_before_any_model_call(tmp_path: Path, prompt: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", prompt, "--db", str(tmp_path / "s.db")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == "run: error: the prompt is empty; give the request to send as PROMPT\n"
    assert result.stdout == ""
    assert not (tmp_path / "s.db").exists()  # no session was opened, so no model was asked

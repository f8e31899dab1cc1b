"""``serve`` and ``worker`` without their extras installed: one line naming the extra, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs the command in an interpreter where the named top-level modules cannot be found, as when not installed.
WITHOUT = """
import importlib.abc, sys
hidden = set(sys.argv[1].split(","))
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
from orchestrator.__main__ import main
sys.exit(main(sys.argv[2:]))
"""


def _run(hidden: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", WITHOUT, hidden, *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("hidden", "args", "extra"),
    [
        ("starlette", ("serve", "--port", "0"), "server"),
        ("hypercorn", ("serve", "--port", "0"), "server"),
        ("starlette", ("worker", "--db", "runs.db"), "server"),
    ],
)
def test_a_command_without_its_extra_names_the_extra_and_exits_2(
    hidden: str, args: tuple[str, ...], extra: str
) -> None:
    ran = _run(hidden, *args)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        f"{args[0]} needs {hidden}, which is not installed: pip install 'orchestrator[{extra}]'"
    ]
    assert "Traceback" not in ran.stderr


def test_help_lists_every_subcommand_with_a_line_each() -> None:
    ran = subprocess.run([sys.executable, "-m", "orchestrator", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0
    lines = ran.stdout.splitlines()
    for name in ("demo", "run", "chat", "sessions", "serve", "worker", "diagrams", "schema"):
        described = [line for line in lines if line.split()[:1] == [name]]
        assert len(described) == 1 and len(described[0].split()) > 2, f"{name} has no line of its own"

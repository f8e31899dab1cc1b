"""README's test command is the one CI runs first, on the bare machine, and it needs no Graphviz."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"Run the tests[^\n]*\n(?:[^\n]+\n)*?\n```sh\n([^\n]+)\n```", readme)
    assert match, "README has no 'Run the tests' command block"
    return match[1]


def test_ci_runs_readmes_test_command_before_installing_graphviz() -> None:
    command = readme_test_command()
    assert command == "bash scripts/test"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith(("#", "echo"))]
    first_run = next(i for i, line in enumerate(commands) if line.startswith(command))
    graphviz = next(i for i, line in enumerate(commands) if "graphviz" in line)
    assert first_run < graphviz
    assert "orchestrator diagrams --check" in commands[-1]


def test_the_test_script_installs_no_graphviz_and_runs_the_whole_suite_with_given_arguments() -> None:
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    code = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    assert not any("graphviz" in line for line in code)
    assert code[-1] == 'exec .venv/bin/python -m pytest "$@"'
    assert any("pip install" in line and ".[test]" in line for line in code)

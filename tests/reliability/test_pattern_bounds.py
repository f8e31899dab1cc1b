"""Catastrophic patterns in grep and glob: answered or refused within a bound, nothing stalls.

The scenario runs in a child process (``pattern_scenario.py``) so that a
pattern that freezes the process (a backtracking engine holds the GIL while it
matches) fails this test at BOUND_SECONDS instead of hanging the suite. Matching
is linear in the text (RE2), so the bound is generous: what must not happen is
exponential time, not a slow machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BOUND_SECONDS = 60
SCENARIO = Path(__file__).with_name("pattern_scenario.py")


def test_catastrophic_patterns_return_within_the_bound_while_another_session_runs(tmp_path: Path) -> None:
    deep = tmp_path / ("a" * 60)
    deep.mkdir()
    (deep / ("a" * 200)).write_text("")
    (tmp_path / "lines.txt").write_text(("a" * 40 + "!\n") * 2000 + "a" * 5000 + "!\n")
    try:
        finished = subprocess.run(
            [sys.executable, str(SCENARIO), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=BOUND_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(f"grep/glob did not return within {BOUND_SECONDS}s: {expired}") from None
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    results = {name: tuple(outcome) for name, outcome in report["results"].items()}
    assert report["other_turns"] == 20
    assert results["nested_quantifier"] == ("succeeded", "no matches")
    assert results["alternation"] == ("succeeded", "no matches")
    assert results["many_stars"] == ("succeeded", "no matches")
    assert results["many_double_stars"] == ("succeeded", "no matches")
    for refused in ("backreference", "lookahead"):
        status, content = results[refused]
        assert status == "failed"
        assert "invalid regular expression" in content and "RE2 syntax" in content
    status, content = results["too_long"]
    assert status == "failed"
    assert "the glob pattern is 1001 characters long; the limit is 1000" in content

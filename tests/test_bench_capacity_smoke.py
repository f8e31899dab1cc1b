"""The capacity benchmark still runs on a throwaway PostgreSQL server: tiny sizes, sane figures, no timing checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import capacity

TINY = capacity.CapacityPlan(
    runs=20, repeats=1, workers=2, parked=20, answer_rate=200.0, idle_seconds=0.5, idle_settle=0.5, timeout=120.0
)


def test_the_server_cpu_counts_the_postmaster_and_its_children() -> None:
    own = capacity.process_cpu_seconds(os.getpid())
    assert own > 0
    assert capacity.process_cpu_seconds(2**22 + 1) == 0.0  # no such process: nothing, not an error
    # This process's children are counted as a postmaster's would be.
    assert capacity.server_cpu_seconds(os.getpid()) >= own


def test_a_tiny_capacity_run_measures_every_figure_and_completes_every_parked_run(tmp_path: Path) -> None:
    rows = capacity.measure(TINY, tmp_path)
    problem = rows[0].get("unavailable")
    if problem:
        pytest.skip(f"no PostgreSQL server: {problem}")
    per_run, parked = rows
    assert per_run["kind"] == "per run" and per_run["statuses"] == ["completed"]
    median = per_run["median"]
    assert median["transactions_per_run"] > median["driver_transactions_per_run"] > 0
    assert median["change_notifications_per_run"] > 0 and median["work_notifications_per_run"] > 0
    assert median["inserted_per_run"] > 0 and median["updated_per_run"] > 0
    assert median["wal_bytes_per_run"] > 0 and median["table_bytes_per_run"] > 0
    assert median["server_cpu_ms_per_run"] > 0 and median["worker_cpu_ms_per_run"] > 0
    assert per_run["settings"]["synchronous_commit"] == "on"
    assert per_run["runs_per_second_per_server_core"] == pytest.approx(1000 / median["server_cpu_ms_per_run"])

    assert parked["kind"] == "parked"
    assert (parked["answered"], parked["resumed"], parked["completed"]) == (20, 20, 20)
    assert 0 <= parked["resume_p50_ms"] <= parked["resume_p99_ms"]
    assert parked["resumed_per_second"] > 0 and parked["worker_cpu_ms_per_resume"] > 0
    for idle in (parked["idle_empty"], parked["idle_parked"]):
        assert idle["server_cpu_ms_per_second"] >= idle["backend_cpu_ms_per_second"] >= 0
        assert idle["worker_cpu_ms_per_second"] >= 0 and idle["transactions_per_second"] >= 0
        assert idle["vacuums"] >= 0 and idle["claim_ms"] > 0 and idle["claim_server_cpu_ms"] >= 0

    table = capacity.render([*rows, {"kind": "capacity", "unavailable": "no server"}])
    assert "runs per second one PostgreSQL core carries" in table
    assert "20 answered, 20 resumed, 20 completed" in table
    assert "not available: no server" in table


def test_the_readme_block_is_written_between_its_markers_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{capacity.BEGIN}\nold figures\n{capacity.END}\nafter\n", encoding="utf-8")
    monkeypatch.setattr(capacity, "README", readme)
    document = {
        "when": "2026-01-01T00:00:00+00:00",
        "command": "python -m bench --only capacity --readme",
        "commit": "abc",
        "machine": {"cpus": 2, "processor": "cpu", "platform": "linux", "python": "3.11"},
        "load": {"before": [0.0, 0.0, 0.0], "after": [0.0, 0.0, 0.0]},
        "note": "shared machine",
        "cpu": 1,
        "seconds": 1.0,
        "results": {"capacity": [{"kind": "capacity", "unavailable": "no server"}]},
    }
    capacity.write_readme(document)
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("before\n") and text.endswith(f"{capacity.END}\nafter\n")
    assert "old figures" not in text and "not available: no server" in text and "Note: shared machine" in text

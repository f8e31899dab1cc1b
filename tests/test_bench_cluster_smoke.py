"""The cluster benchmark still runs: in-process and on worker processes (tiny sizes, no timing checks)."""

from __future__ import annotations

from pathlib import Path

from bench import cluster


def test_in_process_runs_are_all_answered_and_timed() -> None:
    result = cluster.in_process(3)
    assert (result["runs"], result["completed"]) == (3, 3)
    assert result["resume_p99_ms"] is not None and result["resume_p99_ms"] >= 0


def test_runs_on_worker_processes_are_all_answered_and_timed(postgres_dsn: str, tmp_path: Path) -> None:
    result = cluster.through_workers(postgres_dsn, runs=3, workers=2, timeout=60.0, logs=tmp_path)
    assert (result["runs"], result["completed"]) == (3, 3)
    assert result["statuses"] == ["completed"]
    table = cluster.render([result, {"kind": "cluster", "unavailable": "no server"}])
    assert "not available: no server" in table


def test_runs_on_a_worker_embedded_in_the_process_on_sqlite_are_all_answered_and_timed(tmp_path: Path) -> None:
    result = cluster.embedded(3, tmp_path, timeout=60.0)
    assert (result["runs"], result["completed"]) == (3, 3)
    assert result["statuses"] == ["completed"]
    assert result["resume_p99_ms"] is not None and result["resume_p99_ms"] >= 0
    table = cluster.render([cluster.in_process(3), result])
    assert "1 process, embedded worker, SQLite" in table.split("against in-process")[1]  # with its ratio

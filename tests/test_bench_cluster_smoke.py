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


def test_each_row_is_the_median_of_its_repetitions_and_a_failed_one_says_so() -> None:
    from bench.cluster import median_rows

    def row(kind: str, rate: float, p99: float) -> dict[str, object]:
        return {"kind": kind, "runs": 300, "runs_per_second": rate, "resume_p99_ms": p99, "settings": {"fsync": "off"}}

    repeated = [
        [row("in-process", 100.0, 9.0), row("cluster", 10.0, 90.0)],
        [row("in-process", 300.0, 3.0), {"kind": "cluster", "failed": "OSError: no server"}],
        [row("in-process", 200.0, 5.0), row("cluster", 30.0, 70.0)],
    ]
    in_process, cluster = median_rows(repeated)
    assert (in_process["runs_per_second"], in_process["resume_p99_ms"], in_process["runs"]) == (200.0, 5.0, 300)
    assert in_process["repetitions"] == 3 and in_process["runs_per_second_each"] == [100.0, 300.0, 200.0]
    assert in_process["settings"] == {"fsync": "off"}
    assert cluster == {"kind": "cluster", "failed": "OSError: no server"}

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


def test_runs_on_an_embedded_worker_with_the_store_in_memory_are_all_answered(tmp_path: Path) -> None:
    result = cluster.embedded(3, tmp_path, timeout=60.0, in_memory=True)
    assert result["kind"] == cluster.EMBEDDED_IN_MEMORY
    assert (result["runs"], result["completed"], result["statuses"]) == (3, 3, ["completed"])
    assert list(tmp_path.iterdir()) == []  # nothing was written to a file


def test_the_store_floors_write_the_rows_a_real_run_wrote(postgres_dsn: str, tmp_path: Path) -> None:
    import sqlite3

    import psycopg

    from bench import store_floor

    sample = store_floor.sample_run(tmp_path)
    # The run's own rows: its input, and every event and message it wrote, split where it parked.
    assert [kind for _, kind, _ in sample.events].count("ask_user") == 1
    assert sample.events[sample.parked_events - 1][1] == "run_parked"
    assert [role for role, _ in sample.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert sample.parked_messages == 4 and '"q1"' in sample.answer and '"waiting"' in sample.checkpoint

    on_sqlite = store_floor.sqlite_floor(sample, 5, tmp_path)
    (written,) = tmp_path.glob("floor-????????.db")  # not the sample run's store
    with sqlite3.connect(written) as db:
        assert db.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall() == [("completed", 5)]
        assert db.execute("SELECT count(*) FROM events").fetchone() == (5 * len(sample.events),)
        assert db.execute("SELECT count(*) FROM messages").fetchone() == (5 * len(sample.messages),)
        assert db.execute("SELECT count(*) FROM inbox WHERE consumed = 1").fetchone() == (5,)

    on_postgres = store_floor.postgres_floor(sample, 5, postgres_dsn, tmp_path)
    with psycopg.connect(postgres_dsn) as db:
        assert db.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall() == [("completed", 5)]
        assert db.execute("SELECT count(*) FROM events").fetchone() == (5 * len(sample.events),)
    for row in (on_sqlite, on_postgres):
        assert (row["runs"], row["resume_p99_ms"]) == (5, None) and row["runs_per_second"] > 0
    table = cluster.render([cluster.in_process(3), on_sqlite, on_postgres])
    assert store_floor.POSTGRES in table.split("against in-process")[1]


def test_the_machine_time_a_durable_row_leaves_beyond_its_floor_is_worked_out_from_the_rates() -> None:
    from bench import store_floor

    def row(kind: str, rate: float, cpus: int | None = None) -> dict[str, object]:
        found = {"kind": kind, "runs": 300, "runs_per_second": rate, "resume_median_ms": None, "resume_p99_ms": None}
        return found if cpus is None else {**found, "cpus": cpus}

    table = cluster.render(
        [
            row("in-process", 1000.0),
            row(cluster.EMBEDDED, 100.0, 1),
            row(store_floor.SQLITE, 500.0, 1),
            row("2 worker processes, PostgreSQL", 50.0, 2),
            row(store_floor.POSTGRES, 400.0, 2),
        ]
    )
    # 0.2x of 1,000 runs/s is 200 runs/s: 5 ms of one CPU per run, 10 ms of two.
    assert (
        f"{cluster.EMBEDDED} (1 CPU): allowed 5.00 ms, floor 2.00 ms, left 3.00 ms; beyond the floor today 8.00 ms"
        in table
    )
    assert (
        "PostgreSQL (2 CPUs): allowed 10.00 ms, floor 5.00 ms, left 5.00 ms; beyond the floor today 35.00 ms" in table
    )
    # A floor measured on other CPUs than its durable row is not set against it.
    assert "allowed" not in cluster.render(
        [row("in-process", 1000.0), row(cluster.EMBEDDED, 100.0, 1), row(store_floor.SQLITE, 500.0, 2)]
    )

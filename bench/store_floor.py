"""The store's floor under the ``cluster`` workload: what a run's writes cost with no orchestrator code at all.

One run of the workload is carried first by an embedded ``Worker`` on an SQLite run store, and the rows
it wrote are read back: its input, its messages and its events, the checkpoint it parked with, the answer
it was given. The floor then writes those same rows for ``runs`` runs in the fewest transactions the
guarantees allow for this workload (its lookup tool is idempotent, so no intent needs a commit of its own):

1. the run's creation, with its input (one transaction per run, as a web node's request);
2. a claim: the run leased, its session's history read;
3. the park: the messages and events so far, the checkpoint and the parked status;
4. the answer: the inbox item, the run made claimable again (one transaction per run, as a web node's request);
5. a claim: the run leased, its inbox and history read;
6. the end: the rest of the messages and events, the inbox item consumed, the final status.

The worker's transactions (2, 3, 5, 6) each cover ``WORKER_BATCH`` runs, as a group commit at its best, and
a claim names the runs it takes (a real one looks for them first).
The statements are plain SQL through the driver the store uses (``sqlite3``, psycopg) on a schema with
the store's keys. On SQLite one thread writes a WAL file with ``synchronous`` FULL (the run store's
setting) on the benchmark's pinned CPU. On PostgreSQL ``PROCESSES`` processes of ``THREADS`` connections
each write to a throwaway server (``synchronous_commit`` on) on every CPU. Whatever a durable row of the
cluster workload reaches, it cannot beat this row on the same store: the difference is the cost of the
orchestrator's own work (the runtime, the durable layer, the worker and the driver).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

ROOT = Path(__file__).resolve().parent.parent
WORKER_BATCH = 16
"""Runs whose writes share each of the worker's transactions."""
PROCESSES = 2
"""Processes writing to PostgreSQL: as many as the cluster row's workers."""
THREADS = 8
"""Connections of each process writing to PostgreSQL, each carrying its own runs one batch at a time."""
SQLITE = "store floor, SQLite file"
POSTGRES = f"store floor, PostgreSQL, {PROCESSES} processes"

_SCHEMA = (
    "CREATE TABLE runs (request_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, status TEXT NOT NULL,"
    " input TEXT NOT NULL, checkpoint TEXT, lease_owner TEXT, lease_token TEXT, lease_expires DOUBLE PRECISION,"
    " version INTEGER NOT NULL, updated DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX runs_status ON runs (status, updated)",
    "CREATE TABLE messages (session_id TEXT NOT NULL, position INTEGER NOT NULL, role TEXT NOT NULL,"
    " body TEXT NOT NULL, created DOUBLE PRECISION NOT NULL, PRIMARY KEY (session_id, position))",
    "CREATE TABLE events (request_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, body TEXT NOT NULL,"
    " created DOUBLE PRECISION NOT NULL, PRIMARY KEY (request_id, seq))",
    "CREATE TABLE inbox (id {serial} PRIMARY KEY, request_id TEXT NOT NULL, name TEXT NOT NULL,"
    " payload TEXT NOT NULL, consumed INTEGER NOT NULL DEFAULT 0, created DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX inbox_run ON inbox (request_id, consumed)",
)


@attrs.frozen
class RunRows:
    """The rows one run of the workload wrote, split at its park: ``messages`` and ``events`` are
    ``(role, body)`` and ``(seq, type, body)``; the first ``parked_messages`` and ``parked_events`` of
    them were written by the time it parked, with ``checkpoint``; ``answer`` is its inbox item's payload."""

    input: str
    messages: tuple[tuple[str, str], ...]
    events: tuple[tuple[int, str, str], ...]
    parked_messages: int
    parked_events: int
    checkpoint: str
    answer_name: str
    answer: str


def sample_run(directory: Path, timeout: float = 60.0) -> RunRows:
    """Carry one run of the workload on an embedded worker in an SQLite file in ``directory``; its rows."""
    path = directory / f"floor-sample-{uuid.uuid4().hex[:8]}.db"
    parked: dict[str, str] = {}
    trio.run(_carry_one, path, parked, timeout)
    return _rows_of(path, parked)


async def _carry_one(path: Path, parked: dict[str, str], timeout: float) -> None:
    from bench.cluster import _answer_until_ended, _create_runs
    from bench.cluster_app import approval_agent
    from orchestrator.cluster import Worker
    from orchestrator.store.runs_sql import sqlite_run_store

    store = sqlite_run_store(str(path))
    worker = Worker(await approval_agent(), store, name="floor-sample")

    def post(item: Any) -> None:
        record = store.run(item.request_id)
        assert record is not None and record.checkpoint is not None
        parked[item.request_id] = json.dumps(record.checkpoint, separators=(",", ":"))  # as the store writes it
        store.post(item)

    def drive() -> None:
        feed = store.watch()
        try:
            _create_runs(store, [uuid.uuid4().hex], [])
            _answer_until_ended(store, feed, 1, timeout, post)
        finally:
            feed.close()

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await trio.to_thread.run_sync(drive)
            nursery.cancel_scope.cancel()
    finally:
        store.close()


def _rows_of(path: Path, parked: dict[str, str]) -> RunRows:
    """The rows the one run in ``path`` wrote; what was written up to its ``run_parked`` event's commit is the park."""
    ((request_id, checkpoint),) = parked.items()
    with contextlib.closing(sqlite3.connect(path)) as db:
        session_id, input_text, status = db.execute(
            "SELECT session_id, input, status FROM orchestrator_runs WHERE request_id = ?", (request_id,)
        ).fetchone()
        if status != "completed":
            raise RuntimeError(f"the sample run ended {status}, not completed")
        events = db.execute(
            "SELECT seq, type, body, created FROM orchestrator_run_events WHERE request_id = ? ORDER BY seq",
            (request_id,),
        ).fetchall()
        messages = db.execute(
            "SELECT role, body, created FROM messages WHERE session_id = ? ORDER BY position", (session_id,)
        ).fetchall()
        name, payload = db.execute(
            "SELECT name, payload FROM orchestrator_inbox WHERE request_id = ?", (request_id,)
        ).fetchone()
    parked_at = next(created for _, kind, _, created in events if kind == "run_parked")
    return RunRows(
        input=input_text,
        messages=tuple((role, body) for role, body, _ in messages),
        events=tuple((seq, kind, body) for seq, kind, body, _ in events),
        parked_messages=sum(1 for *_, created in messages if created <= parked_at),
        parked_events=sum(1 for *_, created in events if created <= parked_at),
        checkpoint=checkpoint,
        answer_name=name,
        answer=payload,
    )


# the writes ---------------------------------------------------------------------------


class _Writer:
    """The six steps of ``runs``, written through ``execute``/``executemany`` with ``mark`` as the parameter mark;
    ``transaction`` is a context manager factory for one transaction."""

    def __init__(self, rows: RunRows, db: Any, mark: str, transaction: Callable[[], Any]) -> None:
        self.rows = rows
        self.db = db
        self.sql = (lambda text: text.replace("?", mark)) if mark != "?" else (lambda text: text)
        self.transaction = transaction

    def run_batch(self, count: int) -> None:
        rows, sql = self.rows, self.sql
        ids = [uuid.uuid4().hex for _ in range(count)]
        now = time.time()
        for request_id in ids:  # each its own request to a web node
            with self.transaction():
                self.db.execute(
                    sql("INSERT INTO runs VALUES (?, ?, 'queued', ?, NULL, NULL, NULL, NULL, 0, ?)"),
                    (request_id, request_id, rows.input, now),
                )
        self._claim(ids, inbox=False)
        with self.transaction():
            for request_id in ids:
                self._lease_write(request_id, "parked", rows.checkpoint)
                self._append(request_id, 0, rows.parked_messages, 0, rows.parked_events)
        for request_id in ids:  # each its own request to a web node
            with self.transaction():
                self.db.execute(
                    sql("INSERT INTO inbox (request_id, name, payload, created) VALUES (?, ?, ?, ?)"),
                    (request_id, rows.answer_name, rows.answer, now),
                )
                self.db.execute(
                    sql(
                        "UPDATE runs SET status = 'queued', version = version + 1 WHERE request_id = ?"
                        " AND status = 'parked'"
                    ),
                    (request_id,),
                )
        self._claim(ids, inbox=True)
        with self.transaction():
            for request_id in ids:
                self._lease_write(request_id, "completed", None)
                self.db.execute(sql("UPDATE inbox SET consumed = 1 WHERE request_id = ?"), (request_id,))
                self._append(request_id, rows.parked_messages, len(rows.messages), rows.parked_events, len(rows.events))

    def _claim(self, ids: Sequence[str], *, inbox: bool) -> None:
        sql, marks = self.sql, ", ".join("?" for _ in ids)
        with self.transaction():
            self.db.execute(
                sql(
                    f"UPDATE runs SET status = 'running', lease_owner = 'floor', lease_token = ?, lease_expires = ?,"
                    f" version = version + 1 WHERE request_id IN ({marks}) RETURNING *"
                ),
                (uuid.uuid4().hex, time.time() + 15, *ids),
            )
            self.db.fetchall()
            if inbox:
                self.db.execute(sql(f"SELECT * FROM inbox WHERE consumed = 0 AND request_id IN ({marks})"), ids)
                self.db.fetchall()
            self.db.execute(sql(f"SELECT role, body FROM messages WHERE session_id IN ({marks})"), ids)
            self.db.fetchall()

    def _lease_write(self, request_id: str, status: str, checkpoint: str | None) -> None:
        self.db.execute(
            self.sql(
                "UPDATE runs SET status = ?, checkpoint = ?, version = version + 1, updated = ?"
                " WHERE request_id = ? AND lease_owner = 'floor'"
            ),
            (status, checkpoint, time.time(), request_id),
        )

    def _append(
        self, request_id: str, first_message: int, last_message: int, first_event: int, last_event: int
    ) -> None:
        now = time.time()
        messages = self.rows.messages[first_message:last_message]
        if messages:
            self.db.executemany(
                self.sql("INSERT INTO messages VALUES (?, ?, ?, ?, ?)"),
                [(request_id, first_message + n, role, body, now) for n, (role, body) in enumerate(messages)],
            )
        events = self.rows.events[first_event:last_event]
        if events:
            self.db.executemany(
                self.sql("INSERT INTO events VALUES (?, ?, ?, ?, ?)"),
                [(request_id, seq, kind, body, now) for seq, kind, body in events],
            )


def _batches(runs: int) -> list[int]:
    return [min(WORKER_BATCH, runs - start) for start in range(0, runs, WORKER_BATCH)]


def sqlite_floor(rows: RunRows, runs: int, directory: Path) -> dict[str, Any]:
    """``runs`` runs' writes on an SQLite file in ``directory``, by one thread of this process."""
    path = directory / f"floor-{uuid.uuid4().hex[:8]}.db"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA:
            db.execute(statement.format(serial="INTEGER"))
        cursor = db.cursor()

        class _Transaction:
            def __enter__(self) -> None:
                cursor.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind: object, *_: object) -> None:
                cursor.execute("COMMIT" if kind is None else "ROLLBACK")

        writer = _Writer(rows, cursor, "?", _Transaction)
        started, cpu = time.perf_counter(), time.process_time()
        for count in _batches(runs):
            writer.run_batch(count)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        db.close()
    return _floor_row(SQLITE, runs, seconds, cpu, len(os.sched_getaffinity(0)))


def postgres_floor(rows: RunRows, runs: int, dsn: str, directory: Path) -> dict[str, Any]:
    """``runs`` runs' writes on the PostgreSQL database ``dsn`` (made empty for it), by ``PROCESSES`` processes
    (``python -m bench.store_floor``), the rows handed to them in a file in ``directory``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        for statement in _SCHEMA:
            db.execute(statement.format(serial="BIGSERIAL"))
    given = directory / f"floor-rows-{uuid.uuid4().hex[:8]}.json"
    given.write_text(json.dumps(attrs.asdict(rows)), encoding="utf-8")
    share = [runs // PROCESSES + (1 if index < runs % PROCESSES else 0) for index in range(PROCESSES)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.store_floor", dsn, str(given), str(count)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for count in share
    ]
    try:
        for process in processes:  # each connected, so that what is timed is the writing alone
            assert process.stdout is not None
            said = process.stdout.readline()
            if said.strip() != "ready":
                raise RuntimeError(f"a process writing the floor did not start: {said}{process.stdout.read()[-2000:]}")
        started = time.time()
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.close()
        outputs = [process.stdout.read() if process.stdout else "" for process in processes]
        for process in processes:
            process.wait(timeout=60)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    ended, cpu = started, 0.0
    for process, output in zip(processes, outputs, strict=True):
        if process.returncode != 0:
            raise RuntimeError(f"a process writing the floor failed: {output[-2000:]}")
        end, spent = map(float, output.split()[-2:])
        ended, cpu = max(ended, end), cpu + spent
    seconds = ended - started
    return _floor_row(POSTGRES, runs, seconds, cpu, len(os.sched_getaffinity(0)))


def _postgres_process(rows: RunRows, runs: int, dsn: str) -> tuple[float, float]:
    """One process of the PostgreSQL floor: ``THREADS`` connections, each writing its share of ``runs`` runs once
    every one is connected, "ready" printed and "go" read; when the last one ended (``time.time()``) and the CPU
    seconds the writing took. The first error of a connection is raised once every connection ended."""
    import psycopg

    counts = [count for count in (runs // THREADS + (1 if i < runs % THREADS else 0) for i in range(THREADS)) if count]
    connections = [psycopg.connect(dsn, autocommit=True) for _ in counts]
    problems: list[BaseException] = []

    def write(db: Any, count: int) -> None:
        try:
            with db.cursor() as cursor:
                writer = _Writer(rows, cursor, "%s", db.transaction)
                for batch in _batches(count):
                    writer.run_batch(batch)
        except Exception as error:  # raised in the process's main thread below
            problems.append(error)

    threads = [threading.Thread(target=write, args=pair) for pair in zip(connections, counts, strict=True)]
    print("ready", flush=True)
    sys.stdin.readline()
    cpu = time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended, cpu = time.time(), time.process_time() - cpu
    for db in connections:
        db.close()
    if problems:
        raise problems[0]
    return ended, cpu


def _floor_row(kind: str, runs: int, seconds: float, cpu: float, cpus: int) -> dict[str, Any]:
    """A row of the cluster table, on ``cpus`` CPUs: no run is resumed, so it has no resume latency."""
    return {
        "kind": kind,
        "cpus": cpus,
        "runs": runs,
        "completed": runs,
        "seconds": seconds,
        "runs_per_second": runs / seconds if seconds else None,
        "resume_median_ms": None,
        "resume_p99_ms": None,
        "client_cpu_ms_per_run": cpu * 1000 / runs,
    }


if __name__ == "__main__":  # one process of the PostgreSQL floor: DSN ROWS_FILE RUNS; prints its CPU seconds
    given = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
    sample = RunRows(
        **{key: tuple(map(tuple, value)) if isinstance(value, list) else value for key, value in given.items()}
    )
    print(*_postgres_process(sample, int(sys.argv[3]), sys.argv[1]))

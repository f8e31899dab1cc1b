"""The ``capacity`` workload of ``python -m bench``: what a run costs the PostgreSQL run store, measured on its side.

Two measurements on a throwaway PostgreSQL server (``tests/pg.py``; every database made
with ``synchronous_commit`` on, as the ``cluster`` workload's), carried by ``workers``
processes of ``python -m orchestrator worker`` running the ``cluster`` workload's agent
(a lookup tool, an ``ask_user`` question, an answer):

- **per run**: ``runs`` runs started at once, each answered as soon as the driver sees it
  parked, in ``repeats`` repetitions, each on a fresh database with fresh workers. Between
  a snapshot taken once the workers are ready and one taken after every run ended and
  the workers and the driver closed their connections (so every backend reported its
  counts), per run: the database's committed transactions
  (``pg_stat_database.xact_commit``, less the snapshot's own), rows inserted, updated and
  deleted (``tup_*``), WAL bytes (``pg_current_wal_lsn``), growth of the tables and of
  their indexes, the server's CPU time (user + system of the postmaster, of its live
  children and of its exited children it reaped, from ``/proc/PID/stat``) and the
  workers' CPU time. The driver acts as a web node does: it creates each run, learns of
  changes from the store's notifications, reads the statuses of the runs named in them
  (one query per wake-up) and posts each answer; its transactions are in the totals and
  also counted apart. The medians over the repetitions give the runs per second one
  PostgreSQL core carries (1 s / server CPU per run) and one worker core carries.
- **parked**: ``parked`` runs started at once, each parked on its question (a parked run
  holds no worker slot). The workers' and the server's CPU and the database's transactions
  are measured over ``idle_seconds`` before any run exists and again while every run sits
  parked; then the runs are answered at ``answer_rate`` per second (paced by one thread),
  with the approval-to-resume latency of each (from the answer's posting to the
  ``tool_completed`` event of the answered call) and the count of runs that completed.

Results go to their own block of bench/README.md (``python -m bench --only capacity --readme``).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from bench.cluster import ANSWERED_CALL, _start_workers, _stop_workers
from bench.measure import percentile

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "bench" / "README.md"
BEGIN = "<!-- capacity results: written by `python -m bench --only capacity --readme`; do not edit by hand -->"
END = "<!-- end of capacity results -->"
ANSWER_EVENT = "ask_user_response"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
STATS_SETTLE_SECONDS = 1.2
"""Wait before reading the database's counters: an exiting backend reports its counts as it goes."""
ANSWER_THREADS = 4
"""Threads posting the paced answers (answer *i* by thread *i* mod 4), so one slow commit delays no other."""
COUNTERS = (
    "xact_commit",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "wal_bytes",
    "table_bytes",
    "index_bytes",
    "vacuums",
)
"""The database's counters a measurement takes the difference of, in ``database_counters``'s order."""
TABLES = ("orchestrator_runs", "orchestrator_run_events", "orchestrator_inbox", "orchestrator_messages")


@attrs.frozen
class CapacityPlan:
    """Sizes of the capacity workload."""

    runs: int
    repeats: int
    workers: int
    parked: int
    answer_rate: float
    idle_seconds: float
    idle_settle: float
    """Wait before an idle window: a backend that commits within a second of its last report and then idles
    holds its counts for up to 10 s (PostgreSQL's ``PGSTAT_IDLE_INTERVAL``), which would land in the window."""
    timeout: float


PLANS = {
    "full": CapacityPlan(
        runs=300,
        repeats=5,
        workers=2,
        parked=2000,
        answer_rate=200.0,
        idle_seconds=10.0,
        idle_settle=11.0,
        timeout=900.0,
    ),
    "quick": CapacityPlan(
        runs=20, repeats=1, workers=2, parked=20, answer_rate=200.0, idle_seconds=1.0, idle_settle=1.2, timeout=120.0
    ),
}


# CPU time from /proc ------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def process_cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of a process (all its threads); with ``reaped``, also of the children it waited
    for. 0.0 when it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if reaped:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / CLOCK_TICKS


def postmaster_pid(data_directory: Path) -> int:
    """The server's postmaster, from the first line of its ``postmaster.pid``."""
    return int((data_directory / "postmaster.pid").read_text(encoding="ascii").split()[0])


BACKGROUND = ("checkpointer", "background writer", "walwriter", "autovacuum", "logical replication", "archiver")
"""How the titles of a PostgreSQL server's own processes begin (``postgres: TITLE``); every other child serves a
client connection."""


def server_cpu(postmaster: int) -> tuple[float, float]:
    """CPU seconds of a PostgreSQL server so far: the postmaster, every live child (backends, checkpointer,
    WAL writer, autovacuum...) and the children that exited (the postmaster reaps each one, so they are in
    its ``cutime``/``cstime``); and of those, the live children that serve client connections."""
    total = process_cpu_seconds(postmaster, reaped=True)
    backends = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or int(fields[1]) != postmaster:
            continue
        seconds = process_cpu_seconds(int(entry.name), reaped=True)
        total += seconds
        if not _title(int(entry.name)).startswith(BACKGROUND):
            backends += seconds
    return total, backends


def server_cpu_seconds(postmaster: int) -> float:
    """CPU seconds of a PostgreSQL server so far (see ``server_cpu``)."""
    return server_cpu(postmaster)[0]


def _title(pid: int) -> str:
    """A PostgreSQL child's title without its ``postgres: `` prefix ("" when it is gone)."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
    return title.removeprefix("postgres: ")


# the database's counters --------------------------------------------------------------


def database_counters(dsn: str) -> dict[str, Any]:
    """Committed transactions, rows written, WAL position, table and index bytes, autovacuum and autoanalyze
    passes of ``dsn``'s database, and its commit settings (one transaction of its own, which the next reading
    counts)."""
    import psycopg

    sizes = " + ".join(f"coalesce(pg_table_size(to_regclass('{table}')), 0)" for table in TABLES)
    indexes = " + ".join(f"coalesce(pg_indexes_size(to_regclass('{table}')), 0)" for table in TABLES)
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted,"
            f" pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'), {sizes}, {indexes},"
            " (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables),"
            " current_setting('synchronous_commit'), current_setting('fsync')"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    counters: dict[str, Any] = {name: int(value) for name, value in zip(COUNTERS, row[:8], strict=True)}
    counters["synchronous_commit"], counters["fsync"] = row[8], row[9]
    return counters


@attrs.frozen
class Snapshot:
    """The database's counters and the server's and the workers' CPU seconds at one moment."""

    counters: dict[str, Any]
    server_cpu: float
    backend_cpu: float
    worker_cpu: float
    at: float


class Server:
    """A throwaway PostgreSQL server (``tests/pg.py``) whose databases commit synchronously."""

    def __init__(self, started: Any) -> None:
        self.started = started
        self.postmaster = postmaster_pid(started.directory / "data")

    def database(self) -> str:
        """A fresh database with ``synchronous_commit`` on (the database's setting outranks the command line)."""
        import psycopg

        name = f"capacity_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.started.dsn(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
            admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = on')
        dsn: str = self.started.dsn(name)
        return dsn

    def snapshot(self, dsn: str, workers: Sequence[Any], *, cpu_first: bool) -> Snapshot:
        """Counters and CPU; the CPU is read before the counters' connection (``cpu_first``) or after it has
        ended, so that connection's backend is never inside a measured window."""
        if cpu_first:
            server, backends, worker, at = self.cpu(workers)
            counters = database_counters(dsn)
        else:
            counters = database_counters(dsn)
            time.sleep(0.2)  # the counters' backend exits and is reaped
            server, backends, worker, at = self.cpu(workers)
        return Snapshot(counters, server, backends, worker, at)

    def cpu(self, workers: Sequence[Any]) -> tuple[float, float, float, float]:
        """The server's CPU seconds, its client backends', the workers', and when (``perf_counter``)."""
        worker = sum(process_cpu_seconds(process.pid, reaped=True) for process in workers)
        server, backends = server_cpu(self.postmaster)
        return server, backends, worker, time.perf_counter()


# following runs as a web node does ----------------------------------------------------


class Follower:
    """The driver's view of its runs' statuses: woken by the store's notifications, it reads the statuses of the
    runs named in them (every run's when told ``everything``) in one query per wake-up."""

    def __init__(self, store: Any, dsn: str, request_ids: Sequence[str]) -> None:
        import psycopg

        self.feed = store.watch()
        self.db = psycopg.connect(dsn, autocommit=True)
        self.ids = set(request_ids)
        self.status: dict[str, str] = {}
        self.reads = 0

    def wait(self, timeout: float) -> set[str]:
        """The runs whose status changed since the last call (waiting up to ``timeout`` seconds for a change)."""
        changes = self.feed.wait(timeout)
        if changes.everything:
            wanted = list(self.ids)
        else:
            wanted = [request_id for topic, request_id in changes.keys if topic == "run" and request_id in self.ids]
        if not wanted:
            return set()
        self.reads += 1
        rows = self.db.execute(
            "SELECT request_id, status FROM orchestrator_runs WHERE request_id = ANY(%s)", (wanted,)
        ).fetchall()
        moved = {request_id for request_id, status in rows if self.status.get(request_id) != status}
        self.status.update(dict(rows))
        return moved

    def count(self, *statuses: str) -> int:
        return sum(1 for status in self.status.values() if status in statuses)

    def close(self) -> None:
        self.feed.close()
        self.db.close()


FINAL = ("completed", "failed", "cancelled")


class Notifications:
    """Counts the store's notifications by channel on a listening connection of its own (a thread), as one more
    web node would receive them: each is sent by a committing transaction (one naming every run it changed,
    and one on the work channel when a run may be claimed)."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        from orchestrator.store.runs_sql import CHANGE_CHANNEL, WAKE_CHANNEL

        self.counts = {CHANGE_CHANNEL: 0, WAKE_CHANNEL: 0}
        self.db = psycopg.connect(dsn, autocommit=True)
        self.db.execute(f"LISTEN {CHANGE_CHANNEL}; LISTEN {WAKE_CHANNEL}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._count, name="notifications", daemon=True)
        self._thread.start()

    def _count(self) -> None:
        while not self._stop.is_set():
            for note in self.db.notifies(timeout=0.2):
                self.counts[note.channel] = self.counts.get(note.channel, 0) + 1

    def close(self) -> dict[str, int]:
        """Stop counting; the counts by channel."""
        self._stop.set()
        self._thread.join()
        self.db.close()
        return dict(self.counts)


def _new_runs(store: Any, count: int) -> dict[str, str]:
    """``count`` runs created in the store (as web nodes create them): request id to session id."""
    from orchestrator import UserMessage
    from orchestrator.wire.format import encode_message

    runs = {uuid.uuid4().hex: f"s{index}" for index in range(count)}
    message = encode_message(UserMessage("go"))
    for request_id, session_id in runs.items():
        store.create_run(session_id, request_id, message)
    return runs


def _answer(store: Any, request_id: str, session_id: str) -> float:
    """Post the answer to the run's question; when it was posted (wall clock, as the events' timestamps)."""
    from orchestrator.store.runs import NewInboxItem

    posted = time.time()
    store.post(NewInboxItem(session_id, request_id, ANSWER_EVENT, {"tool_call_id": ANSWERED_CALL, "answer": "yes"}))
    return posted


def _resume_latencies(store: Any, answered: dict[str, float]) -> list[float]:
    """Seconds from each answer's posting to the ``tool_completed`` event of the answered call."""
    latencies = []
    for request_id, posted in answered.items():
        for event in store.events(request_id, 0, 10_000):
            if event.type == "tool_completed" and event.body["call"]["id"] == ANSWERED_CALL:
                latencies.append(float(event.body["ts"]) - posted)
    return latencies


# per run ------------------------------------------------------------------------------


def per_run(server: Server, runs: int, workers: int, timeout: float, logs: Path) -> dict[str, Any]:
    """One repetition: ``runs`` runs answered as soon as parked, on a fresh database and fresh workers."""
    from orchestrator.store.runs_sql import CHANGE_CHANNEL, WAKE_CHANNEL, open_run_store

    dsn = server.database()
    store = open_run_store(dsn)  # the tables exist before the workers start (they would race to make them)
    try:
        processes = _start_workers(dsn, workers, logs)
    except BaseException:
        store.close()
        raise
    follower: Follower | None = None
    notifications = Notifications(dsn)
    try:
        time.sleep(STATS_SETTLE_SECONDS)  # the workers' start-up transactions are reported
        before = server.snapshot(dsn, processes, cpu_first=False)
        started = time.perf_counter()
        sessions = _new_runs(store, runs)
        follower = Follower(store, dsn, list(sessions))
        answered: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while follower.count(*FINAL) < runs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{runs - follower.count(*FINAL)} runs did not end within {timeout:g} s")
            for request_id in follower.wait(0.5):
                if follower.status[request_id] == "parked" and request_id not in answered:
                    answered[request_id] = _answer(store, request_id, sessions[request_id])
        seconds = time.perf_counter() - started
        worker_cpu = sum(process_cpu_seconds(process.pid, reaped=True) for process in processes) - before.worker_cpu
        statuses = sorted(set(follower.status.values()))
        driver = runs + len(answered) + follower.reads  # the driver's own transactions: creations, answers, reads
        notes = notifications.close()
        # Stopped workers and closed connections have reported every transaction of theirs.
        _stop_workers(processes)
        follower.close()
        store.close()
        time.sleep(STATS_SETTLE_SECONDS)
        after = server.snapshot(dsn, (), cpu_first=True)
        counters = {key: after.counters[key] - before.counters[key] for key in COUNTERS}
        counters["xact_commit"] -= 1  # the first snapshot's own transaction
        result: dict[str, Any] = {
            "runs": runs,
            "seconds": seconds,
            "runs_per_second": runs / seconds,
            "statuses": statuses,
            "transactions_per_run": counters["xact_commit"] / runs,
            "driver_transactions_per_run": driver / runs,
            "change_notifications_per_run": notes[CHANGE_CHANNEL] / runs,
            "work_notifications_per_run": notes[WAKE_CHANNEL] / runs,
            "inserted_per_run": counters["tup_inserted"] / runs,
            "updated_per_run": counters["tup_updated"] / runs,
            "deleted_per_run": counters["tup_deleted"] / runs,
            "wal_bytes_per_run": counters["wal_bytes"] / runs,
            "table_bytes_per_run": counters["table_bytes"] / runs,
            "index_bytes_per_run": counters["index_bytes"] / runs,
            "server_cpu_ms_per_run": (after.server_cpu - before.server_cpu) / runs * 1000,
            "worker_cpu_ms_per_run": worker_cpu / runs * 1000,
            "settings": {"synchronous_commit": after.counters["synchronous_commit"], "fsync": after.counters["fsync"]},
        }
        return result
    finally:
        notifications.close()
        _stop_workers(processes)
        if follower is not None:
            follower.close()
        store.close()


MEDIAN_KEYS = (
    "runs_per_second",
    "transactions_per_run",
    "driver_transactions_per_run",
    "change_notifications_per_run",
    "work_notifications_per_run",
    "inserted_per_run",
    "updated_per_run",
    "deleted_per_run",
    "wal_bytes_per_run",
    "table_bytes_per_run",
    "index_bytes_per_run",
    "server_cpu_ms_per_run",
    "worker_cpu_ms_per_run",
)


def model(repetitions: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """Medians over the repetitions, and the runs per second one core of the server (of a worker) carries."""
    medians = {key: statistics.median(row[key] for row in repetitions) for key in MEDIAN_KEYS}
    server_ms, worker_ms = medians["server_cpu_ms_per_run"], medians["worker_cpu_ms_per_run"]
    return {
        "repetitions": len(repetitions),
        "workers": workers,
        "runs": repetitions[0]["runs"],
        "statuses": sorted({status for row in repetitions for status in row["statuses"]}),
        "median": medians,
        "spread": {
            key: (min(row[key] for row in repetitions), max(row[key] for row in repetitions))
            for key in ("server_cpu_ms_per_run", "worker_cpu_ms_per_run", "transactions_per_run")
        },
        "runs_per_second_per_server_core": 1000 / server_ms if server_ms > 0 else None,
        "runs_per_second_per_worker_core": 1000 / worker_ms if worker_ms > 0 else None,
        "settings": repetitions[0]["settings"],
    }


# parked -------------------------------------------------------------------------------


CLAIM_LOOKS = 100
"""Claims the driver makes after an idle window, to time one worker's look for work (none is claimable)."""


def _idle(
    server: Server, store: Any, dsn: str, processes: Sequence[Any], seconds: float, settle: float
) -> dict[str, Any]:
    """CPU per second of the server and of the workers, and transactions per second, while nothing is asked;
    then what one look for work (a claim that finds nothing) costs: its median wall time and the server's CPU."""
    time.sleep(settle)  # every backend has reported what it did before the window
    first = server.snapshot(dsn, processes, cpu_first=False)
    time.sleep(seconds)
    last = server.snapshot(dsn, processes, cpu_first=True)
    span = last.at - first.at
    looks = []
    cpu_before = server.cpu(())[0]
    for _ in range(CLAIM_LOOKS):
        began = time.perf_counter()
        if store.claim("capacity-look", 15.0, 64):
            raise RuntimeError("a run was claimable while every run was parked")
        looks.append(time.perf_counter() - began)
    claim_cpu = server.cpu(())[0] - cpu_before
    return {
        "claim_ms": statistics.median(looks) * 1000,
        "claim_server_cpu_ms": claim_cpu / CLAIM_LOOKS * 1000,
        "seconds": span,
        "server_cpu_ms_per_second": (last.server_cpu - first.server_cpu) / span * 1000,
        "backend_cpu_ms_per_second": (last.backend_cpu - first.backend_cpu) / span * 1000,
        "vacuums": last.counters["vacuums"] - first.counters["vacuums"],
        "worker_cpu_ms_per_second": (last.worker_cpu - first.worker_cpu) / span * 1000,
        # Less the first reading's own transaction; a busy backend reports at most once a second: approximate.
        "transactions_per_second": (last.counters["xact_commit"] - first.counters["xact_commit"] - 1) / span,
    }


def parked(server: Server, plan: CapacityPlan, logs: Path) -> dict[str, Any]:
    """``plan.parked`` runs parked at once, idle measured with none and with all parked, then answered at
    ``plan.answer_rate`` per second."""
    from orchestrator.store.runs_sql import open_run_store

    dsn = server.database()
    store = open_run_store(dsn)  # the tables exist before the workers start (they would race to make them)
    try:
        processes = _start_workers(dsn, plan.workers, logs)
    except BaseException:
        store.close()
        raise
    follower: Follower | None = None
    try:
        empty = _idle(server, store, dsn, processes, plan.idle_seconds, plan.idle_settle)
        started = time.perf_counter()
        sessions = _new_runs(store, plan.parked)
        follower = Follower(store, dsn, list(sessions))
        deadline = time.monotonic() + plan.timeout
        while follower.count("parked", *FINAL) < plan.parked:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{plan.parked - follower.count('parked')} runs did not park in {plan.timeout:g} s")
            follower.wait(0.5)
        park_seconds = time.perf_counter() - started
        not_parked = plan.parked - follower.count("parked")
        full = _idle(server, store, dsn, processes, plan.idle_seconds, plan.idle_settle)
        answered: dict[str, float] = {}
        order = list(sessions.items())
        begun = time.perf_counter()

        def answer_paced(first: int) -> None:
            for index in range(first, len(order), ANSWER_THREADS):
                pause = begun + index / plan.answer_rate - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                request_id, session_id = order[index]
                answered[request_id] = _answer(store, request_id, session_id)

        cpu_before = server.cpu(processes)
        answering = [
            threading.Thread(target=answer_paced, args=(first,), name=f"answers {first}", daemon=True)
            for first in range(ANSWER_THREADS)
        ]
        for thread in answering:
            thread.start()
        while follower.count(*FINAL) < plan.parked:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{plan.parked - follower.count(*FINAL)} runs did not end in {plan.timeout:g} s")
            follower.wait(0.5)
        drain_seconds = time.perf_counter() - begun
        cpu_after = server.cpu(processes)
        for thread in answering:
            thread.join()
        answer_seconds = max(answered.values()) - min(answered.values()) if answered else 0.0
        latencies = sorted(_resume_latencies(store, answered))
        return {
            "runs": plan.parked,
            "workers": plan.workers,
            "park_seconds": park_seconds,
            "not_parked": not_parked,
            "idle_empty": empty,
            "idle_parked": full,
            "cpu_tick_ms": 1000 / CLOCK_TICKS,
            "answer_rate": plan.answer_rate,
            "answered": len(answered),
            "answers_per_second": (len(answered) - 1) / answer_seconds if answer_seconds else None,
            "drain_seconds": drain_seconds,
            "resumed_per_second": plan.parked / drain_seconds,
            # Includes the driver's posts and status reads, as the per-run figures do.
            "server_cpu_ms_per_resume": (cpu_after[0] - cpu_before[0]) / plan.parked * 1000,
            "worker_cpu_ms_per_resume": (cpu_after[2] - cpu_before[2]) / plan.parked * 1000,
            "completed": follower.count("completed"),
            "resumed": len(latencies),
            "resume_p50_ms": percentile(latencies, 50) * 1000 if latencies else None,
            "resume_p99_ms": percentile(latencies, 99) * 1000 if latencies else None,
            "resume_max_ms": latencies[-1] * 1000 if latencies else None,
        }
    finally:
        _stop_workers(processes)
        if follower is not None:
            follower.close()
        store.close()


# the workload -------------------------------------------------------------------------


def measure(plan: CapacityPlan, logs: Path, progress: Callable[[str], None] = lambda _: None) -> list[dict[str, Any]]:
    """Both measurements on one throwaway server, or a row saying why there is none."""
    sys.path.insert(0, str(ROOT))
    from tests import pg

    # The benchmark pins itself to one CPU; the server and the workers get every CPU of the machine.
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    try:
        started = pg._start()
        if isinstance(started, str):
            return [{"kind": "capacity", "unavailable": started}]
        try:
            server = Server(started)
            rows: list[dict[str, Any]] = []
            repetitions = []
            for index in range(plan.repeats):
                progress(f"capacity: {plan.runs} runs on {plan.workers} workers ({index + 1}/{plan.repeats})")
                repetitions.append(per_run(server, plan.runs, plan.workers, plan.timeout, logs))
            rows.append({"kind": "per run", **model(repetitions, plan.workers), "each": repetitions})
            progress(f"capacity: {plan.parked} runs parked, answered at {plan.answer_rate:g}/s")
            rows.append({"kind": "parked", **parked(server, plan, logs)})
            return rows
        finally:
            pg._stop(started)
    finally:
        os.sched_setaffinity(0, pinned)


def bench(plan: Any, runtimes: Sequence[str], progress: Callable[[str], None]) -> list[dict[str, Any]]:
    sizes = PLANS[plan.name]
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-capacity-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        return measure(sizes, logs, progress)
    except Exception as error:  # the rest of the run goes on; the row says why
        return [{"kind": "capacity", "failed": f"{type(error).__name__}: {error}"}]


# rendering ----------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(rows: list[dict[str, Any]]) -> str:
    """The capacity figures as plain text."""
    lines: list[str] = []
    for row in rows:
        problem = row.get("unavailable") or row.get("failed")
        if problem:
            lines.append(f"capacity: not available: {problem}")
        elif row["kind"] == "per run":
            lines += _render_per_run(row)
        elif row["kind"] == "parked":
            lines += ["", *_render_parked(row)]
    return "\n".join(lines)


def _render_per_run(row: dict[str, Any]) -> list[str]:
    median, settings = row["median"], row["settings"]
    spread = row["spread"]
    return [
        f"Cost of one run (lookup tool, ask_user, answer) on {row['workers']} worker processes and PostgreSQL"
        f" (synchronous_commit {settings['synchronous_commit']}, fsync {settings['fsync']}):"
        f" median of {row['repetitions']} repetitions of {row['runs']} runs; statuses {', '.join(row['statuses'])}",
        f"{'per run':<44} {'median':>12}",
        f"{'transactions committed':<44} {_fmt(median['transactions_per_run']):>12}"
        f"   (range {_fmt(spread['transactions_per_run'][0])} to {_fmt(spread['transactions_per_run'][1])})",
        f"{'  of which the driver (create, answer, reads)':<44} {_fmt(median['driver_transactions_per_run']):>12}",
        f"{'notifications: runs changed':<44} {_fmt(median['change_notifications_per_run']):>12}",
        f"{'notifications: work to claim':<44} {_fmt(median['work_notifications_per_run']):>12}",
        f"{'rows inserted':<44} {_fmt(median['inserted_per_run']):>12}",
        f"{'rows updated':<44} {_fmt(median['updated_per_run']):>12}",
        f"{'rows deleted':<44} {_fmt(median['deleted_per_run']):>12}",
        f"{'WAL KiB':<44} {_fmt(median['wal_bytes_per_run'] / 1024):>12}",
        f"{'table growth KiB':<44} {_fmt(median['table_bytes_per_run'] / 1024):>12}",
        f"{'index growth KiB':<44} {_fmt(median['index_bytes_per_run'] / 1024):>12}",
        f"{'PostgreSQL server CPU ms':<44} {_fmt(median['server_cpu_ms_per_run'], 2):>12}"
        f"   (range {_fmt(spread['server_cpu_ms_per_run'][0], 2)} to {_fmt(spread['server_cpu_ms_per_run'][1], 2)})",
        f"{'worker processes CPU ms':<44} {_fmt(median['worker_cpu_ms_per_run'], 2):>12}"
        f"   (range {_fmt(spread['worker_cpu_ms_per_run'][0], 2)} to {_fmt(spread['worker_cpu_ms_per_run'][1], 2)})",
        f"{'runs per second (wall, whole cluster)':<44} {_fmt(median['runs_per_second']):>12}",
        "",
        f"runs per second one PostgreSQL core carries (1 s / server CPU per run): "
        f"{_fmt(row['runs_per_second_per_server_core'])}",
        f"runs per second one worker core carries (1 s / worker CPU per run):     "
        f"{_fmt(row['runs_per_second_per_worker_core'])}",
    ]


def _render_parked(row: dict[str, Any]) -> list[str]:
    empty, full = row["idle_empty"], row["idle_parked"]
    parked_label = f"{row['runs']:,} runs parked"
    return [
        f"{row['runs']:,} runs parked at once on {row['workers']} worker processes"
        f" (all parked after {_fmt(row['park_seconds'])} s; {row['not_parked']} ended before parking)",
        f"{'idle, per second of wall time':<30} {'workers CPU ms':>15} {'server CPU ms':>14} {'its backends':>13}"
        f" {'transactions':>13} {'vacuums':>8}",
        *(
            f"{label:<30} {_fmt(idle['worker_cpu_ms_per_second']):>15} {_fmt(idle['server_cpu_ms_per_second']):>14}"
            f" {_fmt(idle['backend_cpu_ms_per_second']):>13} {_fmt(idle['transactions_per_second']):>13}"
            f" {idle['vacuums']:>8}"
            for label, idle in (("no run in the store", empty), (parked_label, full))
        ),
        f"(over {_fmt(empty['seconds'])} s and {_fmt(full['seconds'])} s; its backends: the server's processes"
        " serving connections; vacuums: autovacuum and autoanalyze passes in the window;"
        f" CPU read in ticks of {_fmt(row['cpu_tick_ms'], 0)} ms)",
        f"one look for work (a claim that finds nothing, {CLAIM_LOOKS} after each window):"
        f" {_fmt(empty['claim_ms'], 2)} ms median, server CPU {_fmt(empty['claim_server_cpu_ms'], 2)} ms with no run;"
        f" {_fmt(full['claim_ms'], 2)} ms median, server CPU {_fmt(full['claim_server_cpu_ms'], 2)} ms with"
        f" {row['runs']:,} parked",
        "",
        f"answered at {_fmt(row['answer_rate'], 0)}/s (paced; {_fmt(row['answers_per_second'])}/s reached):"
        f" {row['answered']:,} answered, {row['resumed']:,} resumed, {row['completed']:,} completed,"
        f" last run ended {_fmt(row['drain_seconds'])} s after the first answer ({_fmt(row['resumed_per_second'])} runs"
        " resumed per second)",
        f"CPU per resumed run: server {_fmt(row['server_cpu_ms_per_resume'], 2)} ms,"
        f" workers {_fmt(row['worker_cpu_ms_per_resume'], 2)} ms",
        f"approval-to-resume latency: p50 {_fmt(row['resume_p50_ms'])} ms, p99 {_fmt(row['resume_p99_ms'])} ms,"
        f" max {_fmt(row['resume_max_ms'])} ms",
    ]


def write_readme(document: dict[str, Any]) -> None:
    """Replace the capacity block of bench/README.md (between its markers) with this run's figures."""
    from bench.readme import machine_note

    block = "\n".join(
        [BEGIN, "", machine_note(document), "", "```text", render(document["results"]["capacity"]), "```", "", END]
    )
    text = README.read_text(encoding="utf-8")
    if BEGIN not in text:
        raise RuntimeError(f"{README} has no capacity block ({BEGIN})")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    README.write_text(text[:start] + block + text[end:], encoding="utf-8")

"""The ``cluster`` workload of ``python -m bench``: runs carried by worker processes on PostgreSQL beside in-process.

``runs`` runs start at once; each calls an idempotent lookup tool, then asks
the user (``ask_user``), is answered, and answers. Two ways:

- **in-process**: one agent, ``client.start(...)`` per run, every event read
  with ``handle.events()``; the answer is ``client.deliver(...)`` as soon as
  the question is read;
- **embedded**: one ``Worker`` in this process's own nursery on an SQLite run
  store file (what an application embeds by default), the runs inserted and
  answered through the store as below; on the benchmark's pinned CPU, like in-process;
- **cluster**: ``workers`` processes of ``python -m orchestrator worker`` on a
  throwaway PostgreSQL server (started like the test suite's, ``tests/pg.py``),
  on every CPU (the benchmark's pinning to one is lifted for them);
  the driver inserts the runs (``CLIENTS`` at a time, as concurrent requests to
  a web node do) and posts each answer to the run store's inbox as soon as it
  sees the run parked, as a web node does.

Reported: runs per second (runs / wall time from the first start to the last
end) and the approval-to-resume latency (from the answer's posting to the
``tool_completed`` event of the answered call, timestamped by the process that
carried the run), median and p99. On PostgreSQL (run with ``synchronous_commit``
on) also, per run, the transactions committed in the database
(``pg_stat_database.xact_commit``, less the driver's own reads) and the bytes of
WAL written (``pg_current_wal_lsn``), and the p99 latency of a committing store
call under the load (the driver's answer posts). Results go to their own block of
bench/README.md (``python -m bench --only cluster --readme``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import trio

from bench import store_floor

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "bench" / "README.md"
BEGIN = "<!-- cluster results: written by `python -m bench --only cluster --readme`; do not edit by hand -->"
END = "<!-- end of cluster results -->"
APP = "bench.cluster_app:approval_agent"
ANSWERED_CALL = "q1"
CLIENTS = 8
EMBEDDED = "1 process, embedded worker, SQLite"
EMBEDDED_IN_MEMORY = "1 process, embedded worker, SQLite in memory"
"""Runs created at once on a run store, each by a thread of its own, as concurrent requests to a web node do."""
HEADING = """## Scaling out: workers on PostgreSQL

`python -m bench --only cluster` (`bench/cluster.py`): runs started at once, each calling a lookup
tool, then asking the user and, once answered, answering; carried in-process (`client.start` +
`client.deliver`), by one `Worker` embedded in the benchmark's process on an SQLite run store file,
and by 2 `python -m orchestrator worker` processes (default capacity 64 runs each) on a throwaway
PostgreSQL server (`synchronous_commit` on); on a run store, answers are posted to its inbox as
soon as a run is seen parked. Runs per second: runs / wall time from the first start to the last
end. Approval-to-resume: from the answer's posting to the `tool_completed` event of the answered
call; on workers it includes the wait for a free slot while new runs still fill them. Per run: the
database's committed transactions (listening connections' reads of notifications included) and WAL
bytes; commit p99 is the driver's committing calls (a run's creation, an answer) under the load. The
in-process and embedded rows run on the benchmark's pinned CPU; the workers and the server run on every CPU.

The row **SQLite in memory** is the embedded worker on an SQLite database in the process's memory: the same
statements with no disk under them. The two **store floor** rows (`bench/store_floor.py`) write, for as many
runs, the rows one real run of the workload wrote (sampled first from an embedded worker: its input, messages,
events, parked checkpoint and answer) in the fewest transactions the guarantees allow for it (its creation,
a claim, its park, its answer, a claim, its end; the worker's four each for 16 runs at once), with plain SQL
and no orchestrator code: on SQLite by one thread on the pinned CPU, on PostgreSQL by 2 processes of 8
connections on every CPU. No durable row can beat the floor of its store; the difference is the
orchestrator's own work (the runtime, the durable layer, the worker and the driver).

"""


@attrs.frozen
class ClusterPlan:
    runs: int
    workers: int
    timeout: float
    repetitions: int
    """How many times each row runs (interleaved: every row once, then again); each figure is their median."""


PLANS = {
    "full": ClusterPlan(runs=300, workers=2, timeout=600.0, repetitions=5),
    "quick": ClusterPlan(runs=20, workers=2, timeout=120.0, repetitions=1),
}


def _summary(kind: str, runs: int, seconds: float, latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else None
    return {
        "kind": kind,
        "runs": runs,
        "completed": len(latencies),
        "seconds": seconds,
        "runs_per_second": runs / seconds if seconds else None,
        "resume_median_ms": statistics.median(ordered) * 1000 if ordered else None,
        "resume_p99_ms": p99 * 1000 if p99 is not None else None,
    }


# in-process ---------------------------------------------------------------------------


async def _in_process(runs: int) -> dict[str, Any]:
    from bench.cluster_app import approval_agent
    from orchestrator import AgentRunConfig, ExternalEvent

    client = await approval_agent()
    latencies: list[float] = []

    async def one(index: int) -> None:
        config = AgentRunConfig(session_id=f"s{index}")
        handle = await client.start("go", config=config)
        answered = 0.0
        async for event in handle.events():
            if event.name == "ask_user":
                answered = time.time()
                payload = {"tool_call_id": event.payload["tool_call_id"], "answer": "yes"}
                delivery = client.deliver(ExternalEvent("ask_user_response", payload), config=config)
                assert delivery.accepted, delivery
            elif event.name == "tool_completed" and event.payload["call"].id == ANSWERED_CALL:
                latencies.append(event.ts - answered)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(runs):
            nursery.start_soon(one, index)
    return _summary("in-process", runs, time.perf_counter() - started, latencies)


def in_process(runs: int) -> dict[str, Any]:
    result: dict[str, Any] = trio.run(_in_process, runs)
    return result


# embedded: a worker in this process, on SQLite ---------------------------------------


async def _embedded(runs: int, path: str, timeout: float, kind: str) -> dict[str, Any]:
    from bench.cluster_app import approval_agent
    from orchestrator.cluster import Worker
    from orchestrator.store.runs_sql import sqlite_run_store

    store = sqlite_run_store(path)
    worker = Worker(await approval_agent(), store, name="embedded")
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            driven = await trio.to_thread.run_sync(_drive, store, runs, timeout)
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    seconds, creating, latencies, statuses = driven
    result = _summary(kind, runs, seconds, latencies)
    result["statuses"] = sorted(statuses)
    result["create_seconds"] = creating
    result["cpus"] = len(os.sched_getaffinity(0))
    return result


def embedded(runs: int, directory: Path, timeout: float = 600.0, *, in_memory: bool = False) -> dict[str, Any]:
    """The runs carried by a ``Worker`` in this process on an SQLite run store file in ``directory``, or on one in
    this process's memory (``in_memory``: the same statements with no disk under them)."""
    if in_memory:
        path, kind = ":memory:", EMBEDDED_IN_MEMORY
    else:
        path, kind = str(directory / f"embedded-{uuid.uuid4().hex[:8]}.db"), EMBEDDED
    result: dict[str, Any] = trio.run(_embedded, runs, path, timeout, kind)
    return result


def _drive(store: Any, runs: int, timeout: float) -> tuple[float, float, list[float], set[str]]:
    """Insert ``runs`` runs (``_create_runs``), answer each once it is seen parked, and wait for them all to end (in
    a thread of its own, as a web node's requests would be): the seconds from the first insert to the last end, the
    seconds the inserts took, each run's approval-to-resume latency, and the runs' final statuses."""
    feed = store.watch()
    try:
        ids = [uuid.uuid4().hex for _ in range(runs)]
        started = time.perf_counter()
        creating = _create_runs(store, ids, [])
        answered, _ = _answer_until_ended(store, feed, runs, timeout, store.post)  # woken by the worker's commits
        seconds = time.perf_counter() - started
        return seconds, creating, _latencies(store, ids, answered), {record.status for record in store.runs()}
    finally:
        feed.close()


def _create_runs(store: Any, ids: list[str], commits: list[float]) -> float:
    """Create a run for each of ``ids`` (session ``s<index>``) through ``store.create_run``, ``CLIENTS`` at a time
    from threads of their own, as a web node's concurrent requests would: the seconds it took, and each call's
    duration appended to ``commits``."""
    from orchestrator import UserMessage
    from orchestrator.wire.format import encode_message

    message = encode_message(UserMessage("go"))
    began = time.perf_counter()

    def create(index: int) -> None:
        start = time.perf_counter()
        store.create_run(f"s{index}", ids[index], message)
        commits.append(time.perf_counter() - start)

    with ThreadPoolExecutor(CLIENTS, thread_name_prefix="client") as clients:
        list(clients.map(create, range(len(ids))))
    return time.perf_counter() - began


def _answer_until_ended(
    store: Any, feed: Any, runs: int, timeout: float, post: Callable[[Any], None]
) -> tuple[dict[str, float], int]:
    """Answer each run's question through ``post`` once the run is seen parked, until all ``runs`` runs of the store
    (created before) have ended, looking again at each wake-up of ``feed`` at the runs that have not ended, as a web
    node lists them: when each run's answer was posted (``time.time()``), and how many times the runs were read."""
    from orchestrator.cluster.checkpoint import read
    from orchestrator.store.runs import NewInboxItem

    answered: dict[str, float] = {}
    left = runs
    looks = 0
    deadline = time.monotonic() + timeout
    while left:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{left} runs did not end within {timeout:g} s")
        looks += 1
        active = store.runs(active=True)
        left = len(active)
        for record in active:
            if record.status == "parked" and record.request_id not in answered:
                checkpoint = read(record.checkpoint)
                for wait in checkpoint.waiting if checkpoint else ():
                    payload = {"tool_call_id": wait.tool_call_id, "answer": "yes"}
                    answered[record.request_id] = time.time()
                    post(NewInboxItem(record.session_id, record.request_id, wait.response_event, payload))
        if left:
            feed.wait(0.5)
    return answered, looks


def _latencies(store: Any, ids: list[str], answered: dict[str, float]) -> list[float]:
    """Each run's time from its answer's posting to the ``tool_completed`` event of the answered call."""
    latencies = []
    for request_id in ids:
        for event in store.events(request_id, 0, 10_000):
            body = event.body
            if event.type == "tool_completed" and body["call"]["id"] == ANSWERED_CALL:
                latencies.append(float(body["ts"]) - answered[request_id])
    return latencies


# cluster ------------------------------------------------------------------------------


def _start_workers(dsn: str, count: int, logs: Path, capacity: int | None = None) -> list[subprocess.Popen[bytes]]:
    """``count`` processes of ``python -m orchestrator worker`` carrying the workload's agent, once each says it
    carries runs; when one does not start, every one started is stopped and RuntimeError says why."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(count):
            with (logs / f"worker-{index}.log").open("wb") as out:
                command = [sys.executable, "-m", "orchestrator", "worker", "--app", APP, "--db", dsn]
                command += ["--name", f"w{index}"]
                if capacity is not None:
                    command += ["--capacity", str(capacity)]
                processes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        for index, process in enumerate(processes):
            log = logs / f"worker-{index}.log"
            while "carrying runs" not in log.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker {index} did not start: {log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.05)
    except BaseException:
        _stop_workers(processes)
        raise
    return processes


def through_workers(
    dsn: str, runs: int, workers: int, timeout: float, logs: Path, capacity: int | None = None
) -> dict[str, Any]:
    from orchestrator.store.runs_sql import open_run_store

    store = open_run_store(dsn)
    processes = _start_workers(dsn, workers, logs, capacity)
    feed = store.watch()
    try:
        ids = [uuid.uuid4().hex for _ in range(runs)]
        before = _database_counters(dsn)
        reads = 0  # the driver's own transactions that only read
        commits: list[float] = []  # seconds per committing call of the driver (a run's creation, an answer)
        started = time.perf_counter()
        creating = _create_runs(store, ids, commits)

        def post(item: Any) -> None:
            began = time.perf_counter()
            store.post(item)
            commits.append(time.perf_counter() - began)

        # Woken by the workers' commits, as a web node is.
        answered, looks = _answer_until_ended(store, feed, runs, timeout, post)
        reads += looks
        seconds = time.perf_counter() - started
        latencies = _latencies(store, ids, answered)
        statuses = {record.status for record in store.runs()}
        reads += runs + 1
        # Stopped workers and a closed store have reported every transaction of theirs.
        _stop_workers(processes)
        feed.close()
        store.close()
        after = _database_counters(dsn)
        result = _summary(f"{workers} worker processes, PostgreSQL", runs, seconds, latencies)
        result["statuses"] = sorted(statuses)
        result["transactions_per_run"] = (after["xact_commit"] - before["xact_commit"] - reads - 1) / runs
        result["wal_bytes_per_run"] = (after["wal_bytes"] - before["wal_bytes"]) / runs
        result["commit_p99_ms"] = _p99(commits) * 1000
        result["create_seconds"] = creating
        result["cpus"] = len(os.sched_getaffinity(0))
        result["settings"] = {"synchronous_commit": after["synchronous_commit"], "fsync": after["fsync"]}
        return result
    finally:
        feed.close()
        _stop_workers(processes)
        store.close()


def _stop_workers(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        process.wait(10)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


def _database_counters(dsn: str) -> dict[str, Any]:
    """The database's committed transactions (once its backends reported them), WAL position and commit settings."""
    import psycopg

    time.sleep(1.2)  # a backend reports its counts at most once a second
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'), current_setting('synchronous_commit'),"
            " current_setting('fsync') FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return {"xact_commit": int(row[0]), "wal_bytes": int(row[1]), "synchronous_commit": row[2], "fsync": row[3]}


def cluster(runs: int, workers: int, timeout: float, logs: Path) -> dict[str, Any]:
    """The cluster measurement on a throwaway PostgreSQL server, or why it is not available."""
    return _on_database("cluster", lambda dsn: through_workers(dsn, runs, workers, timeout, logs))


def postgres_floor(sample: Any, runs: int, logs: Path) -> dict[str, Any]:
    """The PostgreSQL store floor (``bench.store_floor``) on a throwaway server, on every CPU like the workers."""
    return _on_database(store_floor.POSTGRES, lambda dsn: store_floor.postgres_floor(sample, runs, dsn, logs))


def _on_database(kind: str, measure: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """``measure`` on a fresh database of a throwaway server (``tests/pg.py``), with every CPU of the machine, or a
    row of ``kind`` saying why there is none."""
    sys.path.insert(0, str(ROOT))
    from tests import pg

    # The benchmark pins itself to one CPU; the server and the processes measured get every CPU of the machine.
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    try:
        server = pg._start()
        if isinstance(server, str):
            return {"kind": kind, "unavailable": server}
        try:
            import psycopg

            name = f"bench_{uuid.uuid4().hex[:12]}"
            with psycopg.connect(server.dsn(), autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
                # The test suite's server, but a commit waits for its WAL, as in production (the database's
                # setting outranks the server's command line).
                admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = on')
            return measure(server.dsn(name))
        finally:
            pg._stop(server)
    finally:
        os.sched_setaffinity(0, pinned)


# the workload -------------------------------------------------------------------------


def bench(plan: Any, runtimes: Sequence[str], progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every row ``repetitions`` times, interleaved so that a change in the machine's load touches them alike;
    each row is the median of its repetitions (``median_rows``)."""
    sizes = PLANS[plan.name]
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-cluster-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    progress("cluster: one run sampled for the store floors")
    sample = store_floor.sample_run(logs, sizes.timeout)
    repeated: list[list[dict[str, Any]]] = []
    for repetition in range(1, sizes.repetitions + 1):
        of = f" ({repetition} of {sizes.repetitions})" if sizes.repetitions > 1 else ""
        progress(f"cluster: {sizes.runs} runs in-process{of}")
        rows = [in_process(sizes.runs)]
        for kind, in_memory in ((EMBEDDED, False), (EMBEDDED_IN_MEMORY, True)):
            progress(f"cluster: {sizes.runs} runs, {kind}{of}")
            rows.append(_row_or_why(kind, lambda m=in_memory: embedded(sizes.runs, logs, sizes.timeout, in_memory=m)))
        progress(f"cluster: {sizes.runs} runs' writes on SQLite with no orchestrator code{of}")
        rows.append(_row_or_why(store_floor.SQLITE, lambda: store_floor.sqlite_floor(sample, sizes.runs, logs)))
        progress(f"cluster: {sizes.runs} runs on {sizes.workers} worker processes{of}")
        rows.append(_row_or_why("cluster", lambda: cluster(sizes.runs, sizes.workers, sizes.timeout, logs)))
        progress(f"cluster: {sizes.runs} runs' writes on PostgreSQL with no orchestrator code{of}")
        rows.append(_row_or_why(store_floor.POSTGRES, lambda: postgres_floor(sample, sizes.runs, logs)))
        repeated.append(rows)
    return median_rows(repeated)


def _row_or_why(kind: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``measure``'s row, or a row of ``kind`` that says why it failed: the rest of the run goes on."""
    try:
        return measure()
    except Exception as error:
        return {"kind": kind, "failed": f"{type(error).__name__}: {error}"}


def median_rows(repeated: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Row by row, the median of each number over the repetitions (``repetitions`` and the runs/s of each are
    kept beside it); a row that failed or was unavailable in any repetition is that repetition's row."""
    medians = []
    for samples in zip(*repeated, strict=True):
        broken = next((row for row in samples if row.get("unavailable") or row.get("failed")), None)
        if broken is not None:
            medians.append(broken)
            continue
        row = dict(samples[0])
        for key in samples[0]:
            values = [sample.get(key) for sample in samples]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                row[key] = statistics.median(values)
        row["repetitions"] = len(samples)
        row["runs_per_second_each"] = [sample.get("runs_per_second") for sample in samples]
        medians.append(row)
    return medians


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(rows: list[dict[str, Any]]) -> str:
    """The cluster figures as a plain-text table."""
    repetitions = max((int(row.get("repetitions", 1)) for row in rows), default=1)
    lines = [
        "Runs with a tool call and an approval: runs per second and approval-to-resume latency"
        + (f" (each figure the median of {repetitions} repetitions)" if repetitions > 1 else ""),
        f"{'carried by':<46} {'runs':>6} {'runs/s':>8} {'resume median ms':>17} {'resume p99 ms':>14}",
    ]
    base = next((row for row in rows if row.get("kind") == "in-process" and row.get("runs_per_second")), None)
    stored = []
    for row in rows:
        problem = row.get("unavailable") or row.get("failed")
        if problem:
            lines.append(f"{row['kind']:<46} not available: {problem}")
            continue
        lines.append(
            f"{row['kind']:<46} {row['runs']:>6} {_fmt(row['runs_per_second']):>8}"
            f" {_fmt(row['resume_median_ms']):>17} {_fmt(row['resume_p99_ms']):>14}"
        )
        if "transactions_per_run" in row:
            stored.append(row)
    if base is not None:
        lines.append("")
        lines.append(f"{'against in-process':<46} {'runs/s':>8} {'resume median':>14} {'resume p99':>11}")
        for row in rows:
            if row is base or not row.get("runs_per_second"):
                continue
            lines.append(
                f"{row['kind']:<46} {_ratio(row['runs_per_second'], base['runs_per_second']):>8}"
                f" {_ratio(row['resume_median_ms'], base['resume_median_ms']):>14}"
                f" {_ratio(row['resume_p99_ms'], base['resume_p99_ms']):>11}"
            )
    lines.extend(_budgets(rows, base))
    for row in stored:
        settings = row.get("settings", {})
        lines.append("")
        lines.append(
            f"{row['kind']}: {_fmt(row['transactions_per_run'])} transactions and"
            f" {_fmt(row['wal_bytes_per_run'] / 1024)} KiB of WAL per run;"
            f" commit p99 {_fmt(row['commit_p99_ms'], 2)} ms"
            f" (synchronous_commit {settings.get('synchronous_commit', '?')}, fsync {settings.get('fsync', '?')})"
        )
    return "\n".join(lines)


TARGET = 0.2
"""The share of the in-process runs per second a durable row is measured against in ``_budgets``."""


def _budgets(rows: list[dict[str, Any]], base: dict[str, Any] | None) -> list[str]:
    """For each durable row beside its store's floor: the machine time per run (its CPUs / its runs per second) at
    ``TARGET`` times the in-process rate, taken by the floor, left beyond it, and taken beyond it today."""
    if base is None:
        return []
    measured = [row for row in rows if row.get("runs_per_second") and row.get("cpus")]
    lines = []
    for durable_kind, floor_kind in (
        (EMBEDDED, store_floor.SQLITE),
        ("worker processes, PostgreSQL", store_floor.POSTGRES),
    ):
        durable = next((row for row in measured if row["kind"].endswith(durable_kind)), None)
        floor = next((row for row in measured if row["kind"] == floor_kind), None)
        if durable is None or floor is None or durable["cpus"] != floor["cpus"]:
            continue
        durable_kind = durable["kind"]
        cpus = durable["cpus"]
        budget = cpus * 1000 / (TARGET * base["runs_per_second"])
        floor_ms = cpus * 1000 / floor["runs_per_second"]
        today = cpus * 1000 / durable["runs_per_second"]
        if not lines:
            lines += [
                "",
                f"machine time per run (CPUs x wall time / runs): allowed at {TARGET}x in-process, taken by the"
                " store's floor, left beyond it; taken beyond the floor today",
            ]
        lines.append(
            f"{durable_kind} ({cpus} CPU{'s' if cpus > 1 else ''}): allowed {budget:.2f} ms, floor {floor_ms:.2f} ms,"
            f" left {budget - floor_ms:.2f} ms; beyond the floor today {today - floor_ms:.2f} ms"
        )
    return lines


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


def write_readme(document: dict[str, Any]) -> None:
    """Replace (or add) the cluster block of bench/README.md with this run's figures."""
    from bench.readme import machine_note

    block = "\n".join(
        [BEGIN, "", machine_note(document), "", "```text", render(document["results"]["cluster"]), "```", "", END]
    )
    text = README.read_text(encoding="utf-8")
    if BEGIN in text:
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + block + text[end:]
    else:
        text = text.rstrip("\n") + "\n\n" + HEADING + block + "\n"
    README.write_text(text, encoding="utf-8")

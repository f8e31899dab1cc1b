"""Run every workload on every runtime, print the tables and write the figures as JSON.

Each measurement runs in a fresh subprocess (``bench.cell``), so runtimes never
share an interpreter, and every ratio compares figures taken in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from bench import capacity, cluster, imports, readme, sse
from bench.measure import Summary, default_cpu, pin
from bench.process import run_cell_command
from bench.report import LABELS, render, targets, usable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
RUNTIMES = ("raw", "ours", "zett")
WORKLOADS = ("turns", "parking", "streaming", "concurrency", "steering", "imports", "profile", "sse")


@attrs.frozen
class Plan:
    """Sizes of one benchmark run."""

    name: str
    turns: int
    turn_repeats: int
    turn_rounds: int
    floor_triggers: int
    parking: tuple[int, ...]
    plan_mode_sessions: int
    traced: bool
    stream_deltas: int
    stream_repeats: int
    slow_deltas: tuple[int, int]
    slow_pause: float
    concurrent_sessions: int
    concurrent_turns: int
    concurrent_latency: float
    concurrent_deltas: int
    steering_runs: int
    import_runs: int
    profile_requests: int
    cell_timeout: float
    parking_timeout: float


FULL = Plan(
    name="full",
    turns=200,
    turn_repeats=7,
    turn_rounds=3,
    floor_triggers=20000,
    parking=(5000, 10000, 50000),
    plan_mode_sessions=2000,
    traced=True,
    stream_deltas=20000,
    stream_repeats=5,
    slow_deltas=(2000, 20000),
    slow_pause=0.5,
    concurrent_sessions=1000,
    concurrent_turns=5,
    concurrent_latency=0.05,
    concurrent_deltas=50,
    steering_runs=500,
    import_runs=10,
    profile_requests=10,
    cell_timeout=300,
    parking_timeout=1200,
)
QUICK = Plan(
    name="quick",
    turns=40,
    turn_repeats=3,
    turn_rounds=1,
    floor_triggers=2000,
    parking=(250, 500, 1000),
    plan_mode_sessions=0,
    traced=False,
    stream_deltas=2000,
    stream_repeats=2,
    slow_deltas=(500, 2000),
    slow_pause=0.1,
    concurrent_sessions=100,
    concurrent_turns=5,
    concurrent_latency=0.01,
    concurrent_deltas=50,
    steering_runs=30,
    import_runs=1,
    profile_requests=2,
    cell_timeout=60,
    parking_timeout=120,
)

#: Modes of the per-turn workload: what each runtime runs and how it is labelled. The headline is
#: orchestrator's ``client.stream`` beside zett-agent's ``client.run``: both build every event of the
#: request and consume it (zett-agent's run iterates its own stream).
TURN_MODES: tuple[tuple[str, str, str], ...] = (
    ("raw", "run", "loop"),
    ("ours", "stream", "client.stream, every event consumed"),
    ("ours", "run", "client.run, no consumer: no events built"),
    ("ours", "bare", "client.run, history=None"),
    ("zett", "run", "client.run, its stream consumed inside"),
    ("zett", "bare", "client.run, extensions=[]"),
)


# running cells ------------------------------------------------------------------


def run_cell(workload: str, runtime: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One measurement in a fresh interpreter; failures come back as ``{"failed": why}``."""
    return run_cell_command([sys.executable, "-m", "bench.cell", workload, runtime, json.dumps(params)], timeout)


# workloads ----------------------------------------------------------------------

Progress = Callable[[str], None]


def bench_turns(plan: Plan, runtimes: Sequence[str], progress: Progress) -> list[dict[str, Any]]:
    """Rounds of every mode and the floor in turn, so slow phases of the machine hit every row alike."""
    modes = [mode for mode in TURN_MODES if mode[0] in runtimes]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    floor: dict[str, Any] = {"runtime": "floor", "mode": "trigger", "label": "bare transitions trigger", "us": []}
    for round_index in range(plan.turn_rounds):
        progress(f"turns: transitions floor (round {round_index + 1}/{plan.turn_rounds})")
        if usable(floor):
            result = run_cell("trigger", "floor", {"count": plan.floor_triggers, "repeats": 5}, plan.cell_timeout)
            if usable(result):
                floor["us"].extend(seconds * 1e6 for seconds in result["seconds_per_trigger"])
            else:
                floor.update(result)
        for runtime, mode, label in modes:
            progress(f"turns: {runtime} {label} (round {round_index + 1}/{plan.turn_rounds})")
            row = rows.setdefault((runtime, mode), {"runtime": runtime, "mode": mode, "label": label, "seconds": []})
            if not usable(row):
                continue
            params = {"turns": plan.turns, "repeats": plan.turn_repeats, "mode": mode}
            result = run_cell("turns", runtime, params, plan.cell_timeout)
            if not usable(result):
                row.update(result)
                continue
            row["seconds"].extend(result["seconds"])
            if "edges_per_turn" in result:
                row["edges_per_turn"] = result["edges_per_turn"]
    for row in rows.values():
        if usable(row):
            per_turn = [seconds / plan.turns * 1e6 for seconds in row["seconds"]]
            row["us_per_turn"] = attrs.asdict(Summary.of(per_turn))
    if usable(floor):
        floor["us_per_trigger"] = attrs.asdict(Summary.of(floor["us"]))
        edges = next((row["edges_per_turn"] for row in rows.values() if row.get("edges_per_turn")), None)
        floor["edges_per_turn"] = edges
        if edges:
            floor["us_per_turn"] = {key: value * edges for key, value in floor["us_per_trigger"].items()}
            floor["us_per_turn"]["count"] = floor["us_per_trigger"]["count"]
    return [floor, *rows.values()]


def bench_parking(plan: Plan, runtimes: Sequence[str], progress: Progress) -> list[dict[str, Any]]:
    """Sessions parked in awaiting-approval at every size, then drained; zett-agent at the smallest only."""
    rows = []
    cells: list[tuple[str, str, int]] = []
    for size in plan.parking:
        cells += [(runtime, "approval", size) for runtime in runtimes if runtime != "zett" or size == plan.parking[0]]
    if plan.plan_mode_sessions:
        cells += [(runtime, "plan_mode", plan.plan_mode_sessions) for runtime in runtimes if runtime != "raw"]
    for runtime, extension, size in cells:
        progress(f"parking: {runtime} {extension} x {size}")
        params: dict[str, Any] = {"count": size, "trace": False, "extension": extension}
        result = run_cell("sessions", runtime, params, plan.parking_timeout)
        row: dict[str, Any] = {"runtime": runtime, "extension": extension, "size": size, **result}
        if usable(result):
            row["seconds_per_session"] = (result["fill_seconds"] + result["drain_seconds"]) / size
        if usable(result) and plan.traced and extension == "approval" and size == plan.parking[0]:
            traced = run_cell("sessions", runtime, {**params, "trace": True}, plan.parking_timeout)
            row["traced_per_session"] = traced.get("traced_per_session")
        rows.append(row)
    return rows


def bench_streaming(plan: Plan, runtimes: Sequence[str], progress: Progress) -> list[dict[str, Any]]:
    """Fast consumers in interleaved rounds (like the per-turn cells), then each slow consumer once."""
    fast: dict[str, dict[str, Any]] = {
        runtime: {"runtime": runtime, "consumer": "fast", "deltas": plan.stream_deltas, "seconds": []}
        for runtime in runtimes
    }
    for round_index in range(plan.turn_rounds):
        for runtime, row in fast.items():
            if not usable(row):
                continue
            progress(f"streaming: {runtime} x {plan.stream_deltas} deltas (round {round_index + 1}/{plan.turn_rounds})")
            params = {"deltas": plan.stream_deltas, "repeats": plan.stream_repeats}
            result = run_cell("streaming", runtime, params, plan.cell_timeout)
            if not usable(result):
                row.update(result)
                continue
            row["seconds"].extend(result["seconds"])
            row["deltas_seen"] = result["deltas_seen"]
    rows = []
    for runtime, row in fast.items():
        if usable(row):
            row["us_per_delta"] = attrs.asdict(
                Summary.of([seconds / plan.stream_deltas * 1e6 for seconds in row["seconds"]])
            )
        rows.append(row)
        for deltas in plan.slow_deltas:
            progress(f"streaming: {runtime}, slow consumer, {deltas} deltas")
            params = {"deltas": deltas, "repeats": 1, "slow": True, "pause": plan.slow_pause}
            result = run_cell("streaming", runtime, params, plan.cell_timeout)
            rows.append({"runtime": runtime, "consumer": "slow", **result})
    return rows


def bench_concurrency(plan: Plan, runtimes: Sequence[str], progress: Progress) -> list[dict[str, Any]]:
    rows = []
    for runtime in runtimes:
        progress(f"concurrency: {runtime} x {plan.concurrent_sessions} sessions")
        params = {
            "sessions": plan.concurrent_sessions,
            "tool_turns": plan.concurrent_turns,
            "latency": plan.concurrent_latency,
            "deltas": plan.concurrent_deltas,
        }
        rows.append({"runtime": runtime, **run_cell("concurrent", runtime, params, plan.cell_timeout)})
    return rows


def bench_steering(plan: Plan, runtimes: Sequence[str], progress: Progress) -> list[dict[str, Any]]:
    rows = []
    for runtime in runtimes:
        progress(f"steering: {LABELS[runtime]}")
        result = run_cell("steering", runtime, {"runs": plan.steering_runs}, plan.cell_timeout)
        row: dict[str, Any] = {"runtime": runtime, "label": LABELS[runtime], **result}
        if usable(result) and result["latencies"]:
            row["ms"] = attrs.asdict(Summary.of([seconds * 1e3 for seconds in result["latencies"]]))
        elif usable(result):
            row["failed"] = "no steering message reached the model"
        rows.append(row)
    return rows


def bench_imports(plan: Plan, runtimes: Sequence[str], progress: Progress) -> list[dict[str, Any]]:
    modules = [imports.MODULES[runtime] for runtime in runtimes]
    progress(f"imports: {', '.join(modules)}")
    measured = imports.import_seconds(modules, plan.import_runs)
    rows = []
    for runtime, module in zip(runtimes, modules, strict=True):
        result = measured[module]
        row: dict[str, Any] = {"runtime": runtime, **result}
        if usable(result):
            row["ms"] = attrs.asdict(Summary.of([seconds * 1e3 for seconds in result["seconds"]]))
            row["offenders"] = imports.offenders(module)
        rows.append(row)
    return rows


def bench_profile(plan: Plan, runtimes: Sequence[str], progress: Progress) -> list[dict[str, Any]]:
    """cProfile of orchestrator's streamed per-turn workload, in a fresh process."""
    if "ours" not in runtimes:
        return []
    progress("profile: orchestrator, client.stream")
    command = [
        sys.executable,
        "-m",
        "bench.profiling",
        "--mode",
        "stream",
        "--turns",
        str(plan.turns),
        "--requests",
        str(plan.profile_requests),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=plan.cell_timeout, check=False)
    if done.returncode != 0:
        return [{"runtime": "ours", "failed": (done.stderr.strip().splitlines() or ["no output"])[-1]}]
    return [{"runtime": "ours", "text": done.stdout.rstrip()}]


BENCHES: dict[str, Callable[[Plan, Sequence[str], Progress], list[dict[str, Any]]]] = {
    "turns": bench_turns,
    "parking": bench_parking,
    "streaming": bench_streaming,
    "concurrency": bench_concurrency,
    "steering": bench_steering,
    "imports": bench_imports,
    "profile": bench_profile,
    "sse": sse.bench,
    "cluster": cluster.bench,  # only with --only cluster: it needs a PostgreSQL server
    "capacity": capacity.bench,  # only with --only capacity: it needs a PostgreSQL server
}


# command line -------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": _cpu_model(),
    }


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of well under a minute")
    parser.add_argument(
        "--only",
        action="append",
        choices=(*WORKLOADS, "cluster", "capacity"),
        help="run only this workload (repeatable)",
    )
    parser.add_argument("--runtime", action="append", choices=RUNTIMES, help="run only this runtime (repeatable)")
    parser.add_argument(
        "--parking", help="comma-separated session counts of the parking workload (default 5000,10000,50000)"
    )
    parser.add_argument(
        "--cpu", default="last", help="CPU to pin every measurement to: a number, 'last' (default) or 'none'"
    )
    parser.add_argument("--output", type=Path, help="JSON file to write (default: bench/results/<time>.json)")
    parser.add_argument(
        "--readme",
        action="store_true",
        help="replace the results section of bench/README.md with this run's tables (full runs only; "
        "with --only sse, the SSE section only)",
    )
    parser.add_argument("--note", default="", help="a sentence about the machine's state, printed with the results")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    plan = QUICK if args.quick else FULL
    if args.parking:
        plan = attrs.evolve(plan, parking=tuple(int(size) for size in args.parking.split(",")))
    cpu = pin(default_cpu() if args.cpu == "last" else None if args.cpu == "none" else int(args.cpu))
    runtimes = tuple(args.runtime or RUNTIMES)
    workloads = tuple(args.only or WORKLOADS)
    sse_only = set(workloads) == {"sse"}
    cluster_only = set(workloads) == {"cluster"}
    capacity_only = set(workloads) == {"capacity"}
    every = set(workloads) == set(WORKLOADS)
    alone = sse_only or cluster_only or capacity_only
    if args.readme and (plan != FULL or not (every or alone) or set(runtimes) != set(RUNTIMES)):
        print("--readme takes only a full run of every workload and runtime (or of --only sse)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    when = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()

    def progress(what: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {what}", file=sys.stderr, flush=True)

    results = {name: BENCHES[name](plan, runtimes, progress) for name in workloads}
    elapsed = time.perf_counter() - started
    document = {
        "when": when.isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
        "commit": _commit(),
        "machine": machine(),
        "load": {"before": load_before, "after": os.getloadavg()},
        "note": args.note,
        "plan": attrs.asdict(plan),
        "cpu": cpu,
        "seconds": elapsed,
        "results": results,
        "targets": targets(results, plan),
    }
    text = render(results, plan)
    print(text)
    if "sse" in results:
        print(sse.render(results["sse"]))
    if "cluster" in results:
        print(cluster.render(results["cluster"]))
    if "capacity" in results:
        print(capacity.render(results["capacity"]))
    print("\n" + readme.machine_note(document))
    output = args.output or RESULTS / f"{when:%Y%m%d-%H%M%S}-{plan.name}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=1))
    print(f"figures written to {output}")
    if args.readme and not alone:
        readme.write(document, text)
        print(f"results section of {readme.README} replaced")
    if args.readme and "sse" in results:
        sse.write_readme(document)
        print(f"SSE results section of {sse.README} replaced")
    if args.readme and "cluster" in results:
        cluster.write_readme(document)
        print(f"cluster results section of {cluster.README} replaced")
    if args.readme and "capacity" in results:
        capacity.write_readme(document)
        print(f"capacity results section of {capacity.README} replaced")
    return 0

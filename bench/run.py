"""Run every workload on every runtime, print a table and write the figures as JSON.

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

from bench import imports
from bench.measure import Summary, default_cpu, pin
from bench.report import LABELS, render, targets, usable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
RUNTIMES = ("raw", "ours", "zett")
WORKLOADS = ("turns", "sessions", "steering", "imports")
#: Names of bench.experiments.EXPERIMENTS (kept here so this process never imports orchestrator).
EXPERIMENT_NAMES = ("table_fire",)


@attrs.frozen
class Plan:
    """Sizes of one benchmark run."""

    turns: int
    turn_repeats: int
    turn_rounds: int
    sessions: int
    steering_runs: int
    import_runs: int
    plan_mode: bool
    traced: bool
    cell_timeout: float
    experiments: tuple[str, ...] = ()


FULL = Plan(
    turns=200,
    turn_repeats=7,
    turn_rounds=3,
    sessions=2000,
    steering_runs=500,
    import_runs=10,
    plan_mode=True,
    traced=True,
    cell_timeout=150,
)
QUICK = Plan(
    turns=40,
    turn_repeats=3,
    turn_rounds=1,
    sessions=100,
    steering_runs=30,
    import_runs=1,
    plan_mode=False,
    traced=False,
    cell_timeout=60,
)

#: Modes of the per-turn workload: what each runtime runs and how it is labelled.
TURN_MODES: tuple[tuple[str, str, str], ...] = (
    ("raw", "run", "loop"),
    ("ours", "run", "client.run"),
    ("ours", "stream", "client.stream"),
    ("ours", "bare", "client.run, history=None"),
    ("zett", "run", "client.run"),
    ("zett", "bare", "client.run, extensions=[]"),
)


# running cells ------------------------------------------------------------------


def run_cell(workload: str, runtime: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One measurement in a fresh interpreter; failures come back as ``{"failed": why}``."""
    command = [sys.executable, "-m", "bench.cell", workload, runtime, json.dumps(params)]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"failed": f"exit {done.returncode}: {last}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# workloads ----------------------------------------------------------------------


def _patched(label: str, plan: Plan) -> str:
    return f"{label} + {'+'.join(plan.experiments)}"


def bench_turns(plan: Plan, runtimes: Sequence[str], progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Rounds of every mode in turn, so slow phases of the machine hit every runtime alike."""
    modes: list[tuple[str, str, str, tuple[str, ...]]] = [(*mode, ()) for mode in TURN_MODES if mode[0] in runtimes]
    if plan.experiments and "ours" in runtimes:
        modes += [("ours", mode, _patched(label, plan), plan.experiments) for _, mode, label in TURN_MODES[1:3]]
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for round_index in range(plan.turn_rounds):
        for runtime, mode, label, patches in modes:
            progress(f"turns: {runtime} {label} (round {round_index + 1}/{plan.turn_rounds})")
            row = rows.setdefault(
                (runtime, mode, label),
                {"runtime": runtime, "mode": mode, "label": label, "experiments": list(patches), "seconds": []},
            )
            if "unavailable" in row or "failed" in row:
                continue
            params = {"turns": plan.turns, "repeats": plan.turn_repeats, "mode": mode, "experiments": list(patches)}
            result = run_cell("turns", runtime, params, plan.cell_timeout)
            if not usable(result):
                row.update(result)
                continue
            row["seconds"].extend(result["seconds"])
    for row in rows.values():
        if usable(row):
            per_turn = [seconds / plan.turns * 1e6 for seconds in row["seconds"]]
            row["us_per_turn"] = attrs.asdict(Summary.of(per_turn))
    return list(rows.values())


def bench_sessions(plan: Plan, runtimes: Sequence[str], progress: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    extensions = ("approval", "plan_mode") if plan.plan_mode else ("approval",)
    cells: list[tuple[str, str, tuple[str, ...]]] = [
        (runtime, extension, ()) for extension in extensions for runtime in runtimes
    ]
    if plan.experiments and "ours" in runtimes:
        cells.append(("ours", "approval", plan.experiments))
    for runtime, extension, patches in cells:
        if runtime == "raw" and extension != "approval":
            continue
        label = _patched(extension, plan) if patches else extension
        progress(f"sessions: {runtime} {label}")
        params: dict[str, Any] = {
            "count": plan.sessions,
            "trace": False,
            "extension": extension,
            "experiments": list(patches),
        }
        result = run_cell("sessions", runtime, params, plan.cell_timeout)
        row: dict[str, Any] = {"runtime": runtime, "extension": extension, "label": label, **result}
        if usable(result) and plan.traced and extension == "approval":
            traced = run_cell("sessions", runtime, {**params, "trace": True}, plan.cell_timeout)
            row["traced_per_session"] = traced.get("traced_per_session")
            row["traced_run"] = traced
        rows.append(row)
    return rows


def bench_steering(plan: Plan, runtimes: Sequence[str], progress: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    cells: list[tuple[str, tuple[str, ...]]] = [(runtime, ()) for runtime in runtimes]
    if plan.experiments and "ours" in runtimes:
        cells.append(("ours", plan.experiments))
    for runtime, patches in cells:
        label = _patched(LABELS[runtime], plan) if patches else LABELS[runtime]
        progress(f"steering: {label}")
        params = {"runs": plan.steering_runs, "experiments": list(patches)}
        result = run_cell("steering", runtime, params, plan.cell_timeout)
        row: dict[str, Any] = {"runtime": runtime, "label": label, "experiments": list(patches), **result}
        if usable(result) and result["latencies"]:
            row["ms"] = attrs.asdict(Summary.of([seconds * 1e3 for seconds in result["latencies"]]))
        elif usable(result):
            row["failed"] = "no steering message reached the model"
        rows.append(row)
    return rows


def bench_imports(plan: Plan, runtimes: Sequence[str], progress: Callable[[str], None]) -> list[dict[str, Any]]:
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


BENCHES: dict[str, Callable[[Plan, Sequence[str], Callable[[str], None]], list[dict[str, Any]]]] = {
    "turns": bench_turns,
    "sessions": bench_sessions,
    "steering": bench_steering,
    "imports": bench_imports,
}


# command line -------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of a few seconds")
    parser.add_argument("--only", action="append", choices=WORKLOADS, help="run only this workload (repeatable)")
    parser.add_argument("--runtime", action="append", choices=RUNTIMES, help="run only this runtime (repeatable)")
    parser.add_argument("--sessions", type=int, help="number of concurrent sessions (workload 2)")
    parser.add_argument(
        "--cpu", default="last", help="CPU to pin every measurement to: a number, 'last' (default) or 'none'"
    )
    parser.add_argument(
        "--experiment",
        action="append",
        choices=[*EXPERIMENT_NAMES, "all"],
        help="also measure orchestrator with this benchmark-only patch applied (repeatable; see bench/experiments.py)",
    )
    parser.add_argument("--output", type=Path, help="JSON file to write (default: bench/results/<time>.json)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    plan = QUICK if args.quick else FULL
    if args.sessions:
        plan = attrs.evolve(plan, sessions=args.sessions)
    if args.experiment:
        chosen = EXPERIMENT_NAMES if "all" in args.experiment else tuple(dict.fromkeys(args.experiment))
        plan = attrs.evolve(plan, experiments=chosen)
    cpu = pin(default_cpu() if args.cpu == "last" else None if args.cpu == "none" else int(args.cpu))
    runtimes = tuple(args.runtime or RUNTIMES)
    workloads = tuple(args.only or WORKLOADS)
    started = time.perf_counter()

    def progress(what: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {what}", file=sys.stderr, flush=True)

    results = {name: BENCHES[name](plan, runtimes, progress) for name in workloads}
    elapsed = time.perf_counter() - started
    print(render(results, plan))
    pinned = "not pinned" if cpu is None else f"measured on CPU {cpu}"
    print(f"\n{machine()['cpus']} CPUs ({pinned}), Python {machine()['python']}; {elapsed:.1f} s in all")
    document = {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "plan": attrs.asdict(plan),
        "cpu": cpu,
        "seconds": elapsed,
        "results": results,
        "targets": targets(results),
    }
    output = args.output or RESULTS / f"{datetime.datetime.now():%Y%m%d-%H%M%S}{'-quick' if args.quick else ''}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=1))
    print(f"figures written to {output}")
    return 0

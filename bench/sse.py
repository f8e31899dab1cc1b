"""The ``sse`` workload of ``python -m bench``: runs served over Server-Sent Events beside the same runs in-process.

Two measurements, each in fresh processes (``bench.sse_cells``), the service
always in a process of its own bound to 127.0.0.1 (``bench.sse_server``):

- **stream**: one run whose scripted model streams ``words`` text deltas, read
  by one reader: events per second and CPU per event of the server process
  and of the reader's process;
- **concurrent**: ``runs`` runs started at once, each read by its own SSE
  client, every model call sleeping ``latency`` seconds, ``tool_turns`` tool
  turns then an answer: wall time beside the ideal (the model latencies on one
  run's critical path) and server CPU per event; beside them the server floor
  of each server: a raw ASGI app replaying one run's recorded traffic to every
  reader (``bench.sse_floor_app``).

The in-process twin of each runs the same agent through ``client.start(...)``
and ``handle.events()``, every event consumed. Results go to their own block of
bench/README.md (``python -m bench --only sse --readme``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from bench.process import run_cell_command

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "bench" / "README.md"
BEGIN = "<!-- sse results: written by `python -m bench --only sse --readme`; do not edit by hand -->"
END = "<!-- end of sse results -->"
TRANSPORTS = ("inprocess", "sse", "sse-uvicorn")
#: The concurrent workload also measures the server floor of each server (``bench.sse_floor_app``).
CONCURRENT_TRANSPORTS = ("inprocess", "sse", "floor", "sse-uvicorn", "floor-uvicorn")
LABELS = {
    "inprocess": "in-process: client.start + handle.events()",
    "sse": "SSE: hypercorn on 127.0.0.1, httpx readers",
    "sse-uvicorn": "SSE: uvicorn + AgentHost on 127.0.0.1, httpx readers",
    "floor": "hypercorn, server floor (raw ASGI, same traffic)",
    "floor-uvicorn": "uvicorn, server floor (raw ASGI, same traffic)",
}


@attrs.frozen
class SsePlan:
    """Sizes of the SSE workloads."""

    words: int
    stream_repeats: int
    runs: int
    latency: float
    tool_turns: int
    answer_words: int
    rounds: int
    cell_timeout: float


PLANS = {
    "full": SsePlan(
        words=20000,
        stream_repeats=5,
        runs=500,
        latency=0.05,
        tool_turns=3,
        answer_words=20,
        rounds=3,
        cell_timeout=600,
    ),
    "quick": SsePlan(
        words=2000,
        stream_repeats=2,
        runs=50,
        latency=0.01,
        tool_turns=2,
        answer_words=10,
        rounds=1,
        cell_timeout=120,
    ),
}


def run_cell(name: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One cell in a fresh interpreter; failures come back as ``{"failed": why}``."""
    return run_cell_command([sys.executable, "-m", "bench.sse_cells", name, json.dumps(params)], timeout)


def uptime() -> str:
    done = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def measure(plan: SsePlan, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every cell, the transports taking turns, so a slow phase of the machine hits each."""
    rows: list[dict[str, Any]] = [{"workload": "machine", "uptime_before": uptime(), "plan": attrs.asdict(plan)}]
    for transport in TRANSPORTS:
        progress(f"sse: one run of {plan.words} deltas, {transport}")
        params = {"words": plan.words, "repeats": plan.stream_repeats, "transport": transport}
        rows.append({"workload": "stream", "transport": transport, **run_cell("stream", params, plan.cell_timeout)})
    for round_index in range(plan.rounds):
        for transport in CONCURRENT_TRANSPORTS:
            progress(f"sse: {plan.runs} concurrent runs, {transport} (round {round_index + 1}/{plan.rounds})")
            params = {
                "runs": plan.runs,
                "latency": plan.latency,
                "tool_turns": plan.tool_turns,
                "words": plan.answer_words,
                "transport": transport,
            }
            result = run_cell("concurrent", params, plan.cell_timeout)
            rows.append({"workload": "concurrent", "transport": transport, "round": round_index, **result})
    rows[0]["uptime_after"] = uptime()
    return rows


def bench(plan: Any, runtimes: Sequence[str], progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """``python -m bench --only sse``: the sizes follow the run's plan (quick or full); orchestrator only."""
    if "ours" not in runtimes:
        return []
    return measure(PLANS[plan.name], progress)


# rendering ------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(title: str, header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *body, strict=True)]
    lines = ["", title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body]
    return lines


def _broken(row: dict[str, Any]) -> str | None:
    if "failed" in row:
        return f"failed: {row['failed']}"
    if "unavailable" in row:
        return f"not available: {row['unavailable']}"
    return None


def _stream_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    body = []
    for row in rows:
        transport = row.get("transport", "?")
        label = LABELS.get(transport, transport)
        broken = _broken(row)
        if broken:
            body.append([label, broken, "", "", "", ""])
            continue
        samples = [s for s in row["samples"] if not s["failed_runs"]]
        problems = [p for s in row["samples"] for p in s["problems"]]
        if not samples:
            # The reason is listed with the problems under the table: a long one would widen every row.
            body.append([label, "failed: see its problem below" if problems else "failed: no sample", "", "", "", ""])
            continue
        events = samples[0]["events"]
        rates = [s["events"] / s["wall_seconds"] for s in samples]
        client = statistics.median(s["client_cpu_seconds"] / s["events"] * 1e6 for s in samples)
        if transport == "inprocess":
            server, reader = _fmt(client, 2), "(same process)"
        else:
            server = _fmt(statistics.median(s["server_cpu_seconds"] / s["events"] * 1e6 for s in samples), 2)
            reader = _fmt(client, 2)
        body.append(
            [
                label,
                f"{events:,}",
                f"{_fmt(statistics.median(rates), 0)} / {_fmt(max(rates), 0)}",
                server,
                reader,
                f"{len(samples)} of {len(row['samples'])}",
            ]
        )
    return body


def _median_per(rows: list[dict[str, Any]], field: str, per: str, scale: float) -> float | None:
    """Median over rows of ``field / per`` (times ``scale``), skipping rows without the figure."""
    values = [row[field] / row[per] * scale for row in rows if row.get(field) is not None and row[per]]
    return statistics.median(values) if values else None


def _concurrent_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    body = []
    twins = [row for row in rows if row.get("transport") == "inprocess" and not _broken(row)]
    twin = _median_per(twins, "client_cpu_seconds", "events", 1e6)
    for transport in CONCURRENT_TRANSPORTS:
        label = LABELS[transport]
        cells = [row for row in rows if row.get("transport") == transport]
        good = [row for row in cells if not _broken(row)]
        if not good:
            why = _broken(cells[0]) if cells else "not measured"
            body.append([label, str(why), *[""] * 9])
            continue
        walls = [row["wall_seconds"] for row in good]
        ideal = good[0]["ideal_seconds"]
        complete = min(row["runs"] - row["failed_runs"] for row in good)
        latencies = sorted(seconds for row in good for seconds in row["run_seconds"])

        # In-process, the one process is both the server and the reader.
        own = "client_cpu_seconds" if transport == "inprocess" else "server_cpu_seconds"
        server, server_run = _median_per(good, own, "events", 1e6), _median_per(good, own, "runs", 1e3)
        reader = _median_per(good, "client_cpu_seconds", "events", 1e6)
        p99 = latencies[max(0, -(-99 * len(latencies) // 100) - 1)] if latencies else None
        writes = _median_per(good, "writes", "runs", 1.0) if transport != "inprocess" else None
        body.append(
            [
                label,
                f"{complete} of {good[0]['runs']}",
                f"{_fmt(min(walls), 2)} / {_fmt(statistics.median(walls), 2)}",
                _fmt(ideal, 2),
                f"{min(walls) / ideal:.1f}x" if ideal else "-",
                _fmt(server, 1),
                f"{server / twin:.1f}x" if server is not None and twin else "-",
                _fmt(server_run, 2),
                _fmt(writes, 1),
                "(same process)" if transport == "inprocess" else _fmt(reader, 1),
                f"{_fmt(statistics.median(latencies), 2)} / {_fmt(p99, 2)}" if latencies else "-",
            ]
        )
    return body


def render(rows: list[dict[str, Any]]) -> str:
    """The SSE figures as plain-text tables."""
    if not rows:
        return ""
    machine = rows[0]
    plan = SsePlan(**machine["plan"])
    streams = [row for row in rows if row.get("workload") == "stream"]
    concurrent = [row for row in rows if row.get("workload") == "concurrent"]
    lines = _table(
        f"SSE, one reader: one run streaming {plan.words:,} text deltas, every event read "
        f"(median of {plan.stream_repeats} after a warm-up)",
        ["transport", "events", "events/s median / best", "CPU µs/event: server", "reader", "clean samples"],
        _stream_rows(streams),
    )
    calls = plan.tool_turns + 1
    lines += _table(
        f"SSE, {plan.runs} concurrent runs, each read by its own reader: {plan.tool_turns} tool turns and an answer of "
        f"{plan.answer_words} words, {plan.latency * 1e3:.0f} ms per model call ({calls} calls: ideal "
        f"{calls * plan.latency:.2f} s); {plan.rounds} round(s)",
        [
            "transport",
            "runs complete",
            "wall s best / median",
            "ideal s",
            "best / ideal",
            "CPU µs/event: server",
            "server / in-process",
            "server ms/run",
            "writes/stream",
            "reader µs/event",
            "run s p50 / p99",
        ],
        _concurrent_rows(concurrent),
    )
    notes = sorted({row["fd_note"] for row in concurrent if row.get("fd_note")})
    limits = sorted({row["fd_limit"] for row in concurrent if row.get("fd_limit")})
    fd = "; ".join(notes) if notes else f"file-descriptor limit {', '.join(map(str, limits)) or '?'}: not raised"
    problems = sorted({p for row in [*streams, *concurrent] for p in _problems(row)})
    lines += ["", f"Readers' process: {fd}."]
    lines += [f"problem: {problem}" for problem in problems[:5]]
    lines += [
        "",
        f"uptime before: {machine.get('uptime_before', '?')}",
        f"uptime after:  {machine.get('uptime_after', '?')}",
    ]
    return "\n".join(lines)


def _problems(row: dict[str, Any]) -> list[str]:
    if "samples" in row:
        return [p for sample in row["samples"] for p in sample["problems"]]
    return list(row.get("problems", []))


# bench/README.md --------------------------------------------------------------------


def section(document: dict[str, Any], tables: str) -> str:
    """The generated SSE block: when, where, the command, and the tables."""
    from bench.readme import machine_note

    parts = [BEGIN, "", machine_note(document), "", "```text", tables.strip("\n"), "```", "", END]
    return "\n".join(parts)


def write_readme(document: dict[str, Any]) -> None:
    """Replace the SSE block of bench/README.md with this run's figures."""
    text = README.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    tables = render(document["results"]["sse"])
    README.write_text(text[:start] + section(document, tables) + text[end:], encoding="utf-8")

"""The tables printed by ``python -m bench``: figures, ratios and targets from the measured rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bench import imports

if TYPE_CHECKING:
    from bench.run import Plan

LABELS = {
    "raw": "raw trio loop",
    "ours": "orchestrator",
    "zett": "zett-agent 0.2.1",
    "floor": "design floor",
}
KIB = 1024


def usable(result: dict[str, Any]) -> bool:
    """Whether a cell measured something (it was neither unavailable nor failed)."""
    return "unavailable" not in result and "failed" not in result


def why(result: dict[str, Any]) -> str:
    """The table text of a cell that measured nothing."""
    if "unavailable" in result:
        return f"not available: {result['unavailable']}"
    return f"failed: {result.get('failed', 'unknown')}"


# figures, ratios and targets ----------------------------------------------------


def _find(rows: list[dict[str, Any]], runtime: str, **match: Any) -> dict[str, Any] | None:
    """The first usable row of ``runtime`` whose fields equal ``match``."""
    for row in rows:
        if row["runtime"] != runtime or not usable(row):
            continue
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def _ratio(mine: float | None, other: float | None) -> float | None:
    if mine is None or other is None or other <= 0:
        return None
    return mine / other


def _turn_min(rows: list[dict[str, Any]], runtime: str, mode: str) -> float | None:
    row = _find(rows, runtime, mode=mode)
    return row["us_per_turn"]["minimum"] if row and "us_per_turn" in row else None


def _parking(rows: list[dict[str, Any]], runtime: str, size: int, field: str) -> float | None:
    row = _find(rows, runtime, extension="approval", size=size)
    return row[field] if row else None


def _per_delta(rows: list[dict[str, Any]], runtime: str) -> float | None:
    row = _find(rows, runtime, consumer="fast")
    return row["us_per_delta"]["minimum"] if row else None


def _slow_peak(rows: list[dict[str, Any]], runtime: str, deltas: int) -> float | None:
    row = _find(rows, runtime, consumer="slow", deltas=deltas)
    return row["peak_traced"] if row else None


def _concurrency(rows: list[dict[str, Any]], runtime: str, field: str) -> float | None:
    row = _find(rows, runtime)
    return row[field] if row else None


def _steering_p99(rows: list[dict[str, Any]], runtime: str) -> float | None:
    row = _find(rows, runtime)
    return row["ms"]["p99"] if row and "ms" in row else None


def _import_min(rows: list[dict[str, Any]], runtime: str) -> float | None:
    row = _find(rows, runtime)
    return row["ms"]["minimum"] if row else None


def _difference(mine: float | None, other: float | None) -> float | None:
    return None if mine is None or other is None else mine - other


def targets(results: dict[str, list[dict[str, Any]]], plan: Plan) -> list[dict[str, Any]]:
    """Each target: what it compares, the measured value, the limit and whether it holds."""
    checks: list[tuple[str, float | None, float, str]] = []
    if "turns" in results:
        rows = results["turns"]
        mine = _turn_min(rows, "ours", "stream")
        checks.append(
            ("per turn: orchestrator stream / zett-agent run", _ratio(mine, _turn_min(rows, "zett", "run")), 0.3, "x")
        )
        checks.append(
            (
                "per turn: orchestrator stream / design floor",
                _ratio(mine, _turn_min(rows, "floor", "trigger")),
                1.5,
                "x",
            )
        )
    if "parking" in results:
        rows, small, large = results["parking"], plan.parking[0], plan.parking[-1]
        per_large = _parking(rows, "ours", large, "seconds_per_session")
        per_small = _parking(rows, "ours", small, "seconds_per_session")
        checks.append((f"parking: time per session at {large} / at {small}", _ratio(per_large, per_small), 1.3, "x"))
        raw_large = _parking(rows, "raw", large, "seconds_per_session")
        checks.append(
            (f"parking: time per session at {large}, orchestrator / raw", _ratio(per_large, raw_large), 10.0, "x")
        )
        rss = _parking(rows, "ours", large, "rss_per_session")
        checks.append((f"parking: RSS per waiting session at {large}", None if rss is None else rss / KIB, 12.0, "KiB"))
    if "streaming" in results:
        rows = results["streaming"]
        checks.append(
            (
                "streaming: per delta, orchestrator / raw",
                _ratio(_per_delta(rows, "ours"), _per_delta(rows, "raw")),
                2.0,
                "x",
            )
        )
        small, large = plan.slow_deltas
        growth = _ratio(_slow_peak(rows, "ours", large), _slow_peak(rows, "ours", small))
        checks.append((f"streaming: slow consumer's peak memory, {large} / {small} deltas", growth, 1.5, "x"))
    if "concurrency" in results:
        rows = results["concurrency"]
        cpu = _ratio(_concurrency(rows, "ours", "cpu_per_call_us"), _concurrency(rows, "raw", "cpu_per_call_us"))
        checks.append(("concurrency: CPU per model call, orchestrator / raw", cpu, 2.5, "x"))
        share = _concurrency(rows, "ours", "gc_share")
        checks.append(
            ("concurrency: garbage collection share of CPU", None if share is None else share * 100, 5.0, "%")
        )
    if "steering" in results:
        checks.append(("steering latency p99, orchestrator", _steering_p99(results["steering"], "ours"), 5.0, "ms"))
    if "imports" in results:
        rows = results["imports"]
        extra = _difference(_import_min(rows, "ours"), _import_min(rows, "raw"))
        checks.append(("import orchestrator minus import trio (min)", extra, 30.0, "ms"))
    return [
        {
            "target": name,
            "value": value,
            "limit": limit,
            "unit": unit,
            "met": None if value is None else value < limit if unit in ("KiB", "%") else value <= limit,
        }
        for name, value, limit, unit in checks
    ]


# the tables ---------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


class _Tables:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def table(self, title: str, header: Sequence[str], body: Sequence[Sequence[str]]) -> None:
        widths = [max(len(str(cell)) for cell in column) for column in zip(header, *body, strict=True)]
        self.lines.append(f"\n{title}")
        self.lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        self.lines.append("  ".join("-" * w for w in widths))
        self.lines.extend("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body)


def _turns(out: _Tables, rows: list[dict[str, Any]], plan: Plan) -> None:
    raw, zett, floor = (
        _turn_min(rows, "raw", "run"),
        _turn_min(rows, "zett", "run"),
        _turn_min(rows, "floor", "trigger"),
    )
    body = []
    for row in rows:
        name = f"{LABELS[row['runtime']]} ({row['label']})"
        if not usable(row):
            body.append([name, why(row), "", "", "", ""])
            continue
        if "us_per_turn" not in row:
            body.append([name, "no edges per turn measured", "", "", "", ""])
            continue
        s = row["us_per_turn"]
        if row["runtime"] == "floor":
            name += f": {row['edges_per_turn']:g} edges x {row['us_per_trigger']['minimum']:.1f} µs"
        mine = s["minimum"]
        body.append(
            [
                name,
                f"{_fmt(s['minimum'])} / {_fmt(s['median'])}",
                _times(_ratio(mine, raw)),
                _times(_ratio(mine, floor)),
                _times(_ratio(mine, zett)),
                str(s["count"]),
            ]
        )
    out.table(
        f"1. per turn: one request of {plan.turns} turns (one no-op tool call each), then the answer",
        ["runtime", "µs/turn min / median", "vs raw", "vs floor", "vs zett run", "samples"],
        body,
    )


def _parking_table(out: _Tables, rows: list[dict[str, Any]], plan: Plan) -> None:
    body = []
    for row in rows:
        name = f"{LABELS[row['runtime']]} ({row['extension']})"
        size = str(row["size"])
        if not usable(row):
            body.append([name, size, why(row), "", "", "", "", "", ""])
            continue
        raw = _parking(rows, "raw", row["size"], "seconds_per_session")
        smallest = _find(rows, row["runtime"], extension=row["extension"])
        traced = row.get("traced_per_session")
        body.append(
            [
                name,
                size,
                _fmt(row["rss_per_session"] / KIB),
                _fmt(None if traced is None else traced / KIB),
                _fmt(row["fill_seconds"], 2),
                _fmt(row["drain_seconds"], 2),
                _fmt(row["seconds_per_session"] * 1e6, 0),
                _times(_ratio(row["seconds_per_session"], smallest["seconds_per_session"] if smallest else None)),
                _times(_ratio(row["seconds_per_session"], raw)),
            ]
        )
    out.table(
        "2. parking: sessions waiting in awaiting-approval at once, then all approved and drained",
        [
            "runtime (pausing extension)",
            "sessions",
            "KiB/session RSS",
            "traced",
            "fill s",
            "drain s",
            "µs/session",
            "vs smallest",
            "vs raw",
        ],
        body,
    )


def _streaming_table(out: _Tables, rows: list[dict[str, Any]], plan: Plan) -> None:
    raw = _per_delta(rows, "raw")
    body = []
    for row in rows:
        name = LABELS[row["runtime"]]
        if row["consumer"] == "fast":
            if not usable(row):
                body.append([name, f"{plan.stream_deltas}, reads every event", why(row), "", ""])
                continue
            s = row["us_per_delta"]
            body.append(
                [
                    name,
                    f"{row['deltas']}, reads every event",
                    f"{_fmt(s['minimum'], 2)} / {_fmt(s['median'], 2)} µs per delta",
                    _times(_ratio(s["minimum"], raw)),
                    f"{row['deltas_seen']} deltas seen",
                ]
            )
        else:
            if not usable(row):
                body.append([name, f"slow consumer, {row.get('deltas', '?')}", why(row), "", ""])
                continue
            body.append(
                [
                    name,
                    f"{row['deltas']}, sleeps {plan.slow_pause:g} s after the 1st event",
                    f"{row['peak_traced'] / KIB:.0f} KiB peak traced",
                    "",
                    f"{row['deltas_seen']} deltas seen",
                ]
            )
    out.table(
        "3. streaming: one model call streaming text deltas without awaiting; the consumer reads every event",
        ["runtime", "deltas, consumer", "figure (min / median)", "vs raw", "check"],
        body,
    )


def _concurrency_table(out: _Tables, rows: list[dict[str, Any]], plan: Plan) -> None:
    raw = _concurrency(rows, "raw", "cpu_per_call_us")
    body = []
    for row in rows:
        name = LABELS[row["runtime"]]
        if not usable(row):
            body.append([name, why(row), "", "", "", "", ""])
            continue
        body.append(
            [
                name,
                _fmt(row["cpu_per_call_us"], 0),
                _times(_ratio(row["cpu_per_call_us"], raw)),
                _fmt(row["gc_share"] * 100, 1, "%"),
                "/".join(str(n) for n in row["gc_collections"]),
                f"{_fmt(row['cpu_seconds'], 2)} / {_fmt(row['wall_seconds'], 2)}",
                f"{row['deltas_seen']}",
            ]
        )
    out.table(
        f"4. concurrency: {plan.concurrent_sessions} sessions at once, each {plan.concurrent_turns} tool turns and an "
        f"answer; {plan.concurrent_latency * 1e3:g} ms model latency, {plan.concurrent_deltas} deltas per call; "
        "every event consumed",
        [
            "runtime",
            "CPU µs per model call",
            "vs raw",
            "GC share of CPU",
            "GC runs gen0/1/2",
            "CPU s / wall s",
            "deltas seen",
        ],
        body,
    )


def _steering_table(out: _Tables, rows: list[dict[str, Any]]) -> None:
    raw, zett = _steering_p99(rows, "raw"), _steering_p99(rows, "zett")
    body = []
    for row in rows:
        name = row["label"]
        if not usable(row):
            body.append([name, why(row), "", "", "", ""])
            continue
        s = row["ms"]
        body.append(
            [
                name,
                f"{_fmt(s['median'], 3)} / {_fmt(s['p99'], 3)}",
                _times(_ratio(s["p99"], raw)),
                _times(_ratio(s["p99"], zett)) if row["runtime"] != "zett" else "",
                f"{s['count']}/{row['runs']}",
                str(row["refused"]),
            ]
        )
    out.table(
        "5. steering latency: emit_external_event on another thread -> model request containing it",
        ["runtime", "ms p50 / p99", "p99 vs raw", "p99 vs zett", "seen", "refused"],
        body,
    )


def _imports_table(out: _Tables, rows: list[dict[str, Any]]) -> None:
    raw, zett = _import_min(rows, "raw"), _import_min(rows, "zett")
    body = []
    for row in rows:
        name = f"{LABELS[row['runtime']]} (import {imports.MODULES[row['runtime']]})"
        if not usable(row):
            body.append([name, why(row), "", "", ""])
            continue
        s = row["ms"]
        packages = row["offenders"].get("packages", {})
        heavy = ", ".join(f"{name} {us / 1e3:.0f}" for name, us in list(packages.items())[:4])
        body.append(
            [
                name,
                f"{_fmt(s['minimum'])} / {_fmt(s['median'])}",
                _fmt(_difference(s["minimum"], raw), 1, " ms"),
                _times(_ratio(s["minimum"], zett)) if row["runtime"] != "zett" else "",
                heavy,
            ]
        )
    out.table(
        "6. import time in fresh processes",
        ["runtime", "ms min / median", "over trio", "vs zett", "own ms by package (-X importtime)"],
        body,
    )
    ours = _find(rows, "ours")
    if ours is not None:
        slowest = ours["offenders"].get("modules", [])[:6]
        listed = ", ".join(f"{line['module']} {line['self_us'] / 1e3:.1f}" for line in slowest)
        out.lines.append(f"slowest modules of import orchestrator (own ms): {listed}")


def render(results: dict[str, list[dict[str, Any]]], plan: Plan) -> str:
    """The results as plain-text tables (the profile, if measured, is not part of them)."""
    out = _Tables()
    if "turns" in results:
        _turns(out, results["turns"], plan)
    if "parking" in results:
        _parking_table(out, results["parking"], plan)
    if "streaming" in results:
        _streaming_table(out, results["streaming"], plan)
    if "concurrency" in results:
        _concurrency_table(out, results["concurrency"], plan)
    if "steering" in results:
        _steering_table(out, results["steering"])
    if "imports" in results:
        _imports_table(out, results["imports"])
    checks = targets(results, plan)
    if checks:
        body = [
            [
                c["target"],
                _fmt(c["value"], 2, c["unit"]),
                f"{'<' if c['unit'] in ('KiB', '%') else '<='} {c['limit']:g}{c['unit']}",
                {True: "met", False: "MISSED", None: "not measured"}[c["met"]],
            ]
            for c in checks
        ]
        out.table("targets (each a ratio or figure from this run)", ["target", "measured", "limit", "result"], body)
    return "\n".join(out.lines)

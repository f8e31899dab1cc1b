"""The tables printed by ``python -m bench``: figures, ratios and targets from the measured rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bench import imports

if TYPE_CHECKING:
    from bench.run import Plan

LABELS = {"raw": "raw trio loop", "ours": "orchestrator", "zett": "zett-agent 0.2.1"}
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


def _find(rows: list[dict[str, Any]], runtime: str, **match: str) -> dict[str, Any] | None:
    """The first usable unpatched row of ``runtime`` whose fields equal ``match``."""
    for row in rows:
        if row["runtime"] != runtime or row.get("experiments") or not usable(row):
            continue
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def _ratio(mine: float | None, other: float | None) -> float | None:
    if mine is None or other is None or other <= 0:
        return None
    return mine / other


def _turn_min(rows: list[dict[str, Any]], runtime: str, mode: str = "run") -> float | None:
    row = _find(rows, runtime, mode=mode)
    return row["us_per_turn"]["minimum"] if row else None


def _session_rss(rows: list[dict[str, Any]], runtime: str) -> float | None:
    row = _find(rows, runtime, extension="approval")
    return row["rss_per_session"] if row else None


def _steering_p99(rows: list[dict[str, Any]], runtime: str) -> float | None:
    row = _find(rows, runtime)
    return row["ms"]["p99"] if row and "ms" in row else None


def _import_min(rows: list[dict[str, Any]], runtime: str) -> float | None:
    row = _find(rows, runtime)
    return row["ms"]["minimum"] if row else None


def targets(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each target: what it compares, the measured value, the limit and whether it holds."""
    checks: list[tuple[str, float | None, float, str]] = []
    if "turns" in results:
        rows = results["turns"]
        mine = _turn_min(rows, "ours")
        checks.append(("per-turn, orchestrator / raw trio loop (min)", _ratio(mine, _turn_min(rows, "raw")), 3.0, "x"))
        checks.append(("per-turn, orchestrator / zett-agent (min)", _ratio(mine, _turn_min(rows, "zett")), 0.5, "x"))
    if "sessions" in results:
        rss = _session_rss(results["sessions"], "ours")
        checks.append(("RSS per waiting session, orchestrator", None if rss is None else rss / KIB, 20.0, "KiB"))
    if "steering" in results:
        checks.append(("steering latency p99, orchestrator", _steering_p99(results["steering"], "ours"), 5.0, "ms"))
    if "imports" in results:
        checks.append(
            ("import orchestrator (min of fresh processes)", _import_min(results["imports"], "ours"), 150, "ms")
        )
    return [
        {
            "target": name,
            "value": value,
            "limit": limit,
            "unit": unit,
            "met": None if value is None else value < limit if unit == "KiB" else value <= limit,
        }
        for name, value, limit, unit in checks
    ]


# the table ----------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render(results: dict[str, list[dict[str, Any]]], plan: Plan) -> str:
    """The results as plain-text tables."""
    out: list[str] = []

    def table(title: str, header: Sequence[str], body: Sequence[Sequence[str]]) -> None:
        widths = [max(len(str(cell)) for cell in column) for column in zip(header, *body, strict=True)]
        out.append(f"\n{title}")
        out.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        out.append("  ".join("-" * w for w in widths))
        out.extend("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in body)

    if "turns" in results:
        rows = results["turns"]
        raw, zett = _turn_min(rows, "raw"), _turn_min(rows, "zett")
        body = []
        for row in rows:
            name = f"{LABELS[row['runtime']]} ({row['label']})"
            if not usable(row):
                body.append([name, why(row), "", "", ""])
                continue
            s = row["us_per_turn"]
            mine = s["minimum"]
            body.append(
                [
                    name,
                    f"{_fmt(s['minimum'])} / {_fmt(s['median'])}",
                    _times(_ratio(mine, raw)),
                    _times(_ratio(mine, zett)) if row["runtime"] != "zett" else "",
                    str(s["count"]),
                ]
            )
        table(
            f"1. per-turn overhead: one request of {plan.turns} turns (one no-op tool call each), then the answer",
            ["runtime", "µs/turn min / median", "vs raw (min)", "vs zett (min)", "repeats"],
            body,
        )

    if "sessions" in results:
        rows = results["sessions"]
        body = []
        for row in rows:
            name = f"{LABELS[row['runtime']]} ({row['label']})"
            if not usable(row):
                body.append([name, why(row), "", "", "", "", ""])
                continue
            traced = row.get("traced_per_session")
            raw_rss = _find(rows, "raw", extension="approval")
            zett_rss = _find(rows, "zett", extension=row["extension"])
            body.append(
                [
                    name,
                    _fmt(row["rss_per_session"] / KIB),
                    _fmt(None if traced is None else traced / KIB),
                    _times(_ratio(row["rss_per_session"], raw_rss["rss_per_session"] if raw_rss else None)),
                    _times(_ratio(row["rss_per_session"], zett_rss["rss_per_session"] if zett_rss else None))
                    if row["runtime"] != "zett"
                    else "",
                    _fmt(row["fill_seconds"] * 1e3, 0),
                    _fmt(row["drain_seconds"] * 1e3, 0),
                ]
            )
        table(
            f"2. concurrency: {plan.sessions} sessions waiting in awaiting-approval, then all approved",
            [
                "runtime (pausing extension)",
                "KiB/session RSS",
                "KiB/session traced",
                "vs raw",
                "vs zett",
                "fill ms",
                "drain ms",
            ],
            body,
        )

    if "steering" in results:
        rows = results["steering"]
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
        table(
            "3. steering latency: emit_external_event on another thread -> model request containing it",
            ["runtime", "ms p50 / p99", "p99 vs raw", "p99 vs zett", "seen", "refused"],
            body,
        )

    if "imports" in results:
        rows = results["imports"]
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
                    _times(_ratio(s["minimum"], raw)),
                    _times(_ratio(s["minimum"], zett)) if row["runtime"] != "zett" else "",
                    heavy,
                ]
            )
        table(
            "4. import time in fresh processes",
            ["runtime", "ms min / median", "vs trio", "vs zett", "own ms by package (-X importtime)"],
            body,
        )
        ours = _find(rows, "ours")
        if ours is not None:
            slowest = ours["offenders"].get("modules", [])[:6]
            listed = ", ".join(f"{line['module']} {line['self_us'] / 1e3:.1f}" for line in slowest)
            out.append(f"slowest modules of import orchestrator (own ms): {listed}")

    checks = targets(results)
    if checks:
        body = [
            [
                c["target"],
                _fmt(c["value"], 2, c["unit"] if c["unit"] != "x" else "x"),
                f"{'<' if c['unit'] == 'KiB' else '<='} {c['limit']:g}{c['unit']}",
                {True: "met", False: "MISSED", None: "not measured"}[c["met"]],
            ]
            for c in checks
        ]
        table("targets", ["target", "measured", "limit", "result"], body)
    return "\n".join(out)

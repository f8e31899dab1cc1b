"""Where a turn's time goes: ``python -m bench.profiling [--mode stream|run] [--turns N] [--requests N]``.

Runs orchestrator's per-turn workload (bench.drivers.ours.turns) under cProfile
in this process and prints the functions with the most own time, and own time
grouped by where the code lives (orchestrator, machines, transitions, trio,
logging, attrs-generated methods, the rest). bench/README.md keeps one output
from before and one from after the changes it describes.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
from collections import defaultdict
from collections.abc import Sequence

_GROUPS = (
    ("transitions", f"{os.sep}transitions{os.sep}"),
    ("trio", f"{os.sep}trio{os.sep}"),
    ("logging", f"{os.sep}logging{os.sep}"),
    ("orchestrator", f"{os.sep}orchestrator{os.sep}"),
    ("machines", f"{os.sep}machines{os.sep}"),
    ("bench driver", f"{os.sep}bench{os.sep}"),
)


def _group(filename: str) -> str:
    if filename.startswith("<attrs generated"):
        return "attrs-generated methods"
    if filename == "~":
        return "builtins"
    for name, marker in _GROUPS:
        if marker in filename:
            return name
    return "other"


def _where(filename: str) -> str:
    for marker in ("site-packages" + os.sep, f"lib{os.sep}python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    root = os.getcwd() + os.sep
    return filename[len(root) :] if filename.startswith(root) else filename


def profile(mode: str, turns: int, requests: int, top: int) -> str:
    from bench.drivers import ours

    ours.turns(turns=turns, repeats=1, mode=mode)  # warm every path once, unprofiled
    profiler = cProfile.Profile()
    profiler.enable()
    ours.turns(turns=turns, repeats=requests, mode=mode)
    profiler.disable()
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in entries.values())
    per_turn = total / (turns * (requests + 1)) * 1e6
    lines = [
        f"cProfile of {requests + 1} requests x {turns} turns, mode {mode}: "
        f"{total:.2f} s own time in all, {per_turn:.1f} µs per turn under the profiler",
        "",
        "own time by where the code lives:",
    ]
    groups: dict[str, float] = defaultdict(float)
    for (filename, _, _), entry in entries.items():
        groups[_group(filename)] += entry[2]
    for name, seconds in sorted(groups.items(), key=lambda item: item[1], reverse=True):
        lines.append(f"  {name:<26} {seconds / total * 100:5.1f}%")
    lines += ["", f"top {top} functions by own time:", "  own %   calls/turn  function"]
    ranked = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:top]
    calls_per_turn = turns * (requests + 1)
    for (filename, line, name), entry in ranked:
        lines.append(
            f"  {entry[2] / total * 100:5.1f}%  {entry[1] / calls_per_turn:9.2f}  {name} ({_where(filename)}:{line})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling", description=__doc__)
    parser.add_argument("--mode", default="stream", choices=("stream", "run"))
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    print(profile(args.mode, args.turns, args.requests, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())

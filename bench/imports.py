"""Import time of each runtime's entry module, measured in fresh interpreters."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent

#: What each runtime's user imports to get create_agent (the floor imports only trio).
MODULES: dict[str, str] = {"raw": "trio", "ours": "orchestrator", "zett": "zett_agent.client"}

_TIMED = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


@attrs.frozen
class ImportLine:
    """One line of ``python -X importtime``: a module, its own and its cumulative time."""

    module: str
    self_us: int
    cumulative_us: int


#: Fresh interpreters may write bytecode caches, as an installed package has them:
#: with PYTHONDONTWRITEBYTECODE set, every import of the (editable) project would
#: compile its sources again, while pip-installed peers load their .pyc files.
_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=_ENV, capture_output=True, text=True, timeout=60, check=False
    )


def _timed(module: str) -> float | str:
    """Seconds to import ``module`` in one fresh process, or why it failed."""
    done = _python("-c", _TIMED.format(module=module))
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"import {module} failed: {last}"
    return float(done.stdout.strip().splitlines()[-1])


def import_seconds(modules: list[str], runs: int) -> dict[str, dict[str, Any]]:
    """Per module, the seconds of ``runs`` fresh imports, taken in turns so machine drift hits all alike.

    Each module is imported once first (to write its .pyc files); a module that fails to import
    gets ``{"unavailable": why}``.
    """
    results: dict[str, dict[str, Any]] = {}
    for module in modules:
        first = _timed(module)
        results[module] = {"unavailable": first} if isinstance(first, str) else {"module": module, "seconds": []}
    for _ in range(runs):
        for module, result in results.items():
            if "unavailable" in result:
                continue
            sample = _timed(module)
            if isinstance(sample, str):
                results[module] = {"unavailable": sample}
            else:
                result["seconds"].append(sample)
    return results


def parse_importtime(stderr: str) -> list[ImportLine]:
    """The module lines of ``-X importtime`` output."""
    lines: list[ImportLine] = []
    for raw in stderr.splitlines():
        if not raw.startswith("import time:"):
            continue
        fields = raw[len("import time:") :].split("|")
        if len(fields) != 3 or not fields[0].strip().isdigit():
            continue
        lines.append(ImportLine(fields[2].strip(), int(fields[0]), int(fields[1])))
    return lines


def offenders(module: str, top: int = 8) -> dict[str, Any]:
    """The slowest modules (own time) and the total own time per top-level package."""
    done = _python("-X", "importtime", "-c", f"import {module}")
    if done.returncode != 0:
        return {"unavailable": f"import {module} failed"}
    lines = parse_importtime(done.stderr)
    packages: dict[str, int] = defaultdict(int)
    for line in lines:
        packages[line.module.split(".")[0]] += line.self_us
    slowest = sorted(lines, key=lambda line: line.self_us, reverse=True)[:top]
    return {
        "modules": [attrs.asdict(line) for line in slowest],
        "packages": dict(sorted(packages.items(), key=lambda item: item[1], reverse=True)[:top]),
        "total_us": max((line.cumulative_us for line in lines if line.module == module), default=0),
    }

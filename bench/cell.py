"""One measurement in a fresh process: ``python -m bench.cell WORKLOAD RUNTIME PARAMS``.

Prints one JSON object on its last line: the driver's figures, or
``{"unavailable": reason}`` when the runtime or an API it needs is missing.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.drivers import Unavailable, load

WORKLOADS = ("turns", "sessions", "streaming", "concurrent", "steering", "trigger")


def measure(workload: str, runtime: str, params: dict[str, Any]) -> dict[str, Any]:
    """Run ``workload`` on ``runtime`` in this process."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}")
    try:
        driver = load(runtime)
        if not hasattr(driver, workload):
            raise Unavailable(f"no {workload} workload for {runtime}")
        result: dict[str, Any] = getattr(driver, workload)(**params)
    except Unavailable as missing:
        return {"unavailable": str(missing)}
    return result


def main(argv: list[str]) -> int:
    workload, runtime, params = argv[0], argv[1], json.loads(argv[2])
    print(json.dumps(measure(workload, runtime, params)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""One driver per runtime, each running the same workloads through its own API.

``raw`` is a hand-written trio loop (the floor), ``ours`` is orchestrator,
``zett`` the published zett-agent package and ``floor`` bare ``transitions``
triggers (the per-edge floor of this design). Drivers are imported only inside
the subprocess that measures them, so runtimes never share a process.
"""

from __future__ import annotations

import importlib
from types import ModuleType

RUNTIMES: dict[str, str] = {
    "raw": "bench.drivers.raw",
    "ours": "bench.drivers.ours",
    "zett": "bench.drivers.zett",
    "floor": "bench.drivers.floor",
}


class Unavailable(Exception):
    """A runtime, or an API a workload needs, is not installed."""


def load(runtime: str) -> ModuleType:
    """The driver module of ``runtime``; Unavailable when its package is missing."""
    try:
        return importlib.import_module(RUNTIMES[runtime])
    except ModuleNotFoundError as missing:
        package = (missing.name or "a dependency").split(".")[0]
        hint = " (pip install -e '.[bench]')" if runtime == "zett" else ""
        raise Unavailable(f"{package} is not installed{hint}") from None

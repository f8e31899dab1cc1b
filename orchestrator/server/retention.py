"""The prune loop a served backend runs while the app lives: ``create_app(..., retention=Retention(...))``."""

from __future__ import annotations

import logging
from typing import Any

import anyio

from orchestrator.store.errors import StoreUnavailable
from orchestrator.store.retention import PruneReport, Retention

log = logging.getLogger("orchestrator.server")


def pruner_of(backend: Any) -> Any:
    """``backend.prune``; TypeError naming the backend when it cannot prune."""
    prune = getattr(backend, "prune", None)
    if not callable(prune):
        raise TypeError(f"create_app(retention=...) needs a backend that can prune; {type(backend).__name__} cannot")
    return prune


async def prune_forever(backend: Any, retention: Retention) -> None:
    """A prune pass now and every ``retention.every`` seconds until cancelled; a failed pass is logged and
    the next one runs as planned (a store that cannot be reached skips a round)."""
    prune = pruner_of(backend)
    while True:
        try:
            report: PruneReport = await prune(retention)
        except StoreUnavailable as down:
            log.warning("nothing pruned: %s", down)
        except Exception:
            log.exception("a prune pass failed")
        else:
            if report.runs or report.sessions:
                log.info("pruned %d ended runs and %d idle sessions", report.runs, len(report.sessions))
        await anyio.sleep(retention.every)

"""The stores' metrics: transaction durations by operation and claim lag, as OpenTelemetry instruments.

Without the ``otel`` extra nothing is measured (one check of a module variable per transaction).
With it, the instruments come from the global meter provider (made at the first transaction), or from
the one ``use_meter_provider`` names; see docs/operations.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.observe.otel_metrics import StoreInstruments

__all__ = ["claimed", "measured", "store_instruments", "use_meter_provider"]

_UNSET: Any = object()
_instruments: Any = _UNSET


def store_instruments() -> StoreInstruments | None:
    """The stores' instruments, or None when OpenTelemetry is not installed."""
    global _instruments
    if _instruments is _UNSET:
        try:
            from orchestrator.observe.otel_metrics import StoreInstruments
        except ImportError:
            _instruments = None
        else:
            _instruments = StoreInstruments(None)
    found: StoreInstruments | None = _instruments
    return found


def use_meter_provider(meter_provider: Any) -> None:
    """Make the stores' instruments from ``meter_provider`` (an OpenTelemetry MeterProvider; None: the global one).

    ImportError without the ``otel`` extra."""
    global _instruments
    from orchestrator.observe.otel_metrics import StoreInstruments

    _instruments = StoreInstruments(meter_provider)


@contextmanager
def measured(system: str, operation: str, kind: str = "runs") -> Iterator[None]:
    """Record the duration of the transaction this surrounds as ``operation`` of a ``system`` store
    (``kind``: the run store's ``runs`` or a session store's ``sessions``)."""
    instruments = _instruments if _instruments is not _UNSET else store_instruments()
    if instruments is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    except BaseException as error:
        instruments.transaction(system, kind, operation, time.perf_counter() - started, error)
        raise
    instruments.transaction(system, kind, operation, time.perf_counter() - started, None)


def claimed(kind: str, lag: float) -> None:
    """Record that a run was claimed ``lag`` seconds after it became claimable (``kind``: queued, take_over)."""
    instruments = _instruments if _instruments is not _UNSET else store_instruments()
    if instruments is not None:
        instruments.claimed(kind, lag)

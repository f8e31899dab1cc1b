"""The cycle collector is paused while the package loads.

Loading builds a few hundred thousand objects (classes, functions, their
generated methods) and frees almost none, so the collections the allocations
would trigger meanwhile find nothing to free. ``resume`` restores the
collector's previous setting; ``orchestrator/__init__`` calls it in a
``finally``, so a failed import leaves the collector as it found it.
"""

import gc

_WAS_ENABLED = gc.isenabled()
gc.disable()


def resume() -> None:
    """Re-enable the collector if it was enabled before the package started loading."""
    if _WAS_ENABLED:
        gc.enable()

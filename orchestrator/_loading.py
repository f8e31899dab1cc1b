"""The cycle collector is paused while the package loads, and what loading built is frozen.

Loading builds tens of thousands of objects (classes, functions, their
generated methods) and frees almost none, so the collections the allocations
would trigger meanwhile find nothing to free. ``resume`` then moves every
object alive at that moment into the collector's permanent generation
(``gc.freeze``), so no later collection traverses them (nor the one that
re-enabling the collector would start over all of them at once), and restores
the collector's previous setting. ``orchestrator/__init__`` calls it in a
``finally``, so a failed import leaves the collector as it found it.

Frozen objects are never collected: an application that imports the package
after building reference cycles it will drop later can call ``gc.unfreeze()``.
"""

import gc

_WAS_ENABLED = gc.isenabled()
gc.disable()


def resume() -> None:
    """Freeze what is alive, then re-enable the collector if it was enabled before the package loaded."""
    gc.freeze()
    if _WAS_ENABLED:
        gc.enable()

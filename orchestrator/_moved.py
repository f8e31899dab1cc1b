"""Module paths that moved into packages keep working: ``orchestrator.stream`` is ``orchestrator.runtime.stream``.

A finder on ``sys.meta_path`` answers only the old names listed in ``MOVED``: it imports the
module under its new name and registers that same module object under the old one, so both
names give one module (its classes and globals are shared, and patching one patches the other).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence

MOVED = {
    "orchestrator.compactor": "orchestrator.runtime.compactor",
    "orchestrator.context": "orchestrator.runtime.context",
    "orchestrator.edges": "orchestrator.runtime.edges",
    "orchestrator.emission": "orchestrator.runtime.emission",
    "orchestrator.handle": "orchestrator.runtime.handle",
    "orchestrator.inbox": "orchestrator.runtime.inbox",
    "orchestrator.pending": "orchestrator.runtime.pending",
    "orchestrator.response_checks": "orchestrator.runtime.response_checks",
    "orchestrator.sinks": "orchestrator.runtime.sinks",
    "orchestrator.steering_points": "orchestrator.runtime.steering_points",
    "orchestrator.stream": "orchestrator.runtime.stream",
    "orchestrator.tool_runner": "orchestrator.runtime.tool_runner",
    "orchestrator.schema": "orchestrator.wire.schema",
    "orchestrator.diagrams": "orchestrator.observe.diagrams",
    "orchestrator.trace": "orchestrator.observe.trace",
    "orchestrator.feature_events": "orchestrator.events.features",
    "orchestrator.scenarios": "orchestrator.providers.scripted",
    "orchestrator.model_choice": "orchestrator.providers.choice",
    "orchestrator.apploader": "orchestrator.cli.apploader",
    "orchestrator.demo": "orchestrator.cli.demo",
    "orchestrator.extensions.filesystem": "orchestrator.extensions.files.filesystem",
    "orchestrator.extensions.bash": "orchestrator.extensions.files.bash",
    "orchestrator.extensions.fs_confine": "orchestrator.extensions.files.confine",
    "orchestrator.extensions.fs_match": "orchestrator.extensions.files.match",
    "orchestrator.extensions.fs_walk": "orchestrator.extensions.files.walk",
    "orchestrator.extensions.fs_write": "orchestrator.extensions.files.write",
    "orchestrator.extensions.capped_read": "orchestrator.extensions.files.capped_read",
}
"""Old module path -> the path it moved to."""


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module of its new name (imported if it was not yet)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run (the module ran once, under its new name): give it back the spec of that name,
        which the import system has just replaced with the alias's on the shared module object."""
        module.__spec__ = self.spec


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds the old names of ``MOVED``; every other name is left to the other finders."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())

"""Adversarial tests: hostile models, providers, tools, files and callers.

The helpers of the main test folder (``support``, ``provider_mock``) are importable here too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.processes import Cluster

_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture
def sqlite_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Worker and web node processes (``tests.cluster.processes``) on an SQLite run store in ``tmp_path``."""
    with Cluster(f"sqlite:///{tmp_path / 'runs.db'}", tmp_path, tmp_path / "marks") as running:
        yield running

"""Adversarial tests: hostile models, providers, tools, files and callers.

The helpers of the main test folder (``support``, ``provider_mock``) are importable here too.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.cluster.conftest import postgres_cluster, sqlite_cluster
from tests.cluster.stores import cluster, cluster_store, pg_store, store

# the cluster tests' fixtures, for the tests here too (a module may define its own)
__all__ = ["cluster", "cluster_store", "pg_store", "postgres_cluster", "sqlite_cluster", "store"]

_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)



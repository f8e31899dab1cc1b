"""Fixtures of the cluster tests: a cluster of processes (see ``tests.cluster.processes``) on each store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.processes import Cluster
from tests.cluster.stores import cluster, cluster_store, pg_store, store

# shared fixtures (tests.cluster.stores); a module may define its own
__all__ = ["cluster", "cluster_store", "pg_store", "store"]


@pytest.fixture
def sqlite_cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(f"sqlite:///{tmp_path / 'runs.db'}", tmp_path, tmp_path / "marks") as running:
        yield running


@pytest.fixture
def postgres_cluster(postgres_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(postgres_dsn, tmp_path, tmp_path / "marks") as running:
        yield running

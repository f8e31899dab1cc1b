"""Shared fixtures: a run store on each backend in turn, and a cluster of processes on each with its store.

The conftests of ``tests/cluster`` and ``tests/reliability`` offer them; a test module may define its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.store.runs_sql import SQLRunStore, open_run_store, postgres_run_store, sqlite_run_store
from tests.cluster.processes import Cluster

__all__ = ["cluster", "cluster_store", "pg_store", "store"]


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLRunStore]:
    """A run store of its own: an SQLite file in ``tmp_path``, then the throwaway PostgreSQL server's database."""
    if request.param == "sqlite":
        made = sqlite_run_store(str(tmp_path / "runs.db"))
    else:
        made = postgres_run_store(request.getfixturevalue("postgres_dsn"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def pg_store(postgres_dsn: str) -> Iterator[SQLRunStore]:
    """A run store on the throwaway PostgreSQL server's database alone, for what only PostgreSQL does."""
    made = postgres_run_store(postgres_dsn)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    """A cluster of processes (``tests.cluster.processes``) on SQLite, then on PostgreSQL."""
    found: Cluster = request.getfixturevalue(f"{'postgres' if request.param == 'postgresql' else 'sqlite'}_cluster")
    return found


@pytest.fixture
def cluster_store(cluster: Cluster) -> Iterator[SQLRunStore]:
    """The cluster's run store, opened by the test beside its processes."""
    opened = open_run_store(cluster.dsn)
    try:
        yield opened
    finally:
        opened.close()

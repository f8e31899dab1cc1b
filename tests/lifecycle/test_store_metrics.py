"""The stores' OpenTelemetry metrics: each run store transaction's duration by operation, and claim lag (from a
run becoming claimable to its claim), read back through the SDK's in-memory reader and scraped from /metrics;
without OpenTelemetry the store measures nothing and works the same."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk.metrics", reason="the otel extra (OpenTelemetry SDK) is not installed")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator.cluster.webnode import StoreBackend
from orchestrator.messages import UserMessage
from orchestrator.store import metrics as store_metrics
from orchestrator.store.runs import RunCommit
from orchestrator.store.runs_sql import sqlite_run_store
from orchestrator.wire.format import encode_message
from tests.server.support import serving


@pytest.fixture(autouse=True)
def fresh_instruments(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(store_metrics, "_instruments", store_metrics._UNSET)
    yield


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def test_transactions_are_timed_by_operation_and_a_claim_records_its_lag(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    store_metrics.use_meter_provider(MeterProvider(metric_readers=[reader]))
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        store.create_run("s1", "r1", encode_message(UserMessage("hi")))
        time.sleep(0.3)  # the run waits at least this long for its claim
        (lease,) = store.claim("w", 30)
        store.commit(lease, RunCommit(status="completed"))
    finally:
        store.close()
    found = points(reader)
    durations = {
        point.attributes["orchestrator.store.operation"]: point
        for point in found["orchestrator.store.transaction.duration"]
    }
    assert {"open", "create_run", "claim", "commit"} <= set(durations)
    assert all(point.attributes["db.system.name"] == "sqlite" for point in durations.values())
    assert all(point.attributes["orchestrator.store.kind"] == "runs" for point in durations.values())
    assert durations["claim"].count == 1 and durations["claim"].sum >= 0
    (lag,) = found["orchestrator.store.claim.lag"]
    assert lag.attributes == {"orchestrator.claim.kind": "queued"}
    assert lag.count == 1 and lag.sum >= 0.3


def test_taking_over_an_expired_lease_records_the_lag_from_its_expiry(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    store_metrics.use_meter_provider(MeterProvider(metric_readers=[reader]))
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        store.create_run("s1", "r1", encode_message(UserMessage("hi")))
        (first,) = store.claim("crashed", 0.05)
        time.sleep(0.4)  # the lease expired 0.35 s ago, at least
        (taken,) = store.claim("w", 30)
    finally:
        store.close()
    assert taken.request_id == first.request_id
    found = points(reader)["orchestrator.store.claim.lag"]
    lags = {point.attributes["orchestrator.claim.kind"]: point for point in found}
    assert set(lags) == {"queued", "take_over"}
    assert lags["take_over"].count == 1 and lags["take_over"].sum >= 0.3


def test_a_failed_transaction_is_timed_with_its_error_type(tmp_path: Path) -> None:
    from orchestrator.errors import SessionBusy

    reader = InMemoryMetricReader()
    store_metrics.use_meter_provider(MeterProvider(metric_readers=[reader]))
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        store.create_run("s1", "r1", encode_message(UserMessage("hi")))
        with pytest.raises(SessionBusy):
            store.create_run("s1", "r2", encode_message(UserMessage("again")))
    finally:
        store.close()
    failed = [
        point.attributes
        for point in points(reader)["orchestrator.store.transaction.duration"]
        if "error.type" in point.attributes
    ]
    assert failed == [
        {
            "db.system.name": "sqlite",
            "orchestrator.store.kind": "runs",
            "orchestrator.store.operation": "create_run",
            "error.type": "SessionBusy",
        }
    ]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_session_stores_writes_are_timed_by_operation(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from orchestrator import AssistantMessage, ScriptedModel, create_agent
    from orchestrator.config import AgentRunConfig
    from orchestrator.extensions.session_store import SessionStoreExtension
    from orchestrator.store.interface import SessionStore
    from orchestrator.store.sqlite import SQLiteStore

    reader = InMemoryMetricReader()
    store_metrics.use_meter_provider(MeterProvider(metric_readers=[reader]))
    store: SessionStore
    if kind == "sqlite":
        store = SQLiteStore(tmp_path / "sessions.db")
    else:
        from orchestrator.store.postgres import PostgresStore

        store = PostgresStore(request.getfixturevalue("postgres_dsn"))
    client = await create_agent(
        ScriptedModel([AssistantMessage("hello")]), history=None, extensions=[SessionStoreExtension(store)]
    )
    await client.run("hi", config=AgentRunConfig("s1"))
    store.close()
    applied = [
        point
        for point in points(reader)["orchestrator.store.transaction.duration"]
        if point.attributes["orchestrator.store.operation"] == "apply"
    ]
    assert len(applied) == 1 and applied[0].count >= 2  # the input and the answer, at least
    assert applied[0].attributes["orchestrator.store.kind"] == "sessions"
    assert applied[0].attributes["db.system.name"] == kind


async def test_the_store_metrics_are_scraped_from_a_web_nodes_metrics_route(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.exporter.prometheus", reason="the Prometheus exporter is not installed")
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    store_metrics.use_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)]))
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        async with serving(StoreBackend(store), metrics=registry) as base, httpx.AsyncClient(timeout=20) as http:  # type: ignore[arg-type]
            started = await http.post(f"{base}/sessions/s1/runs", json={"input": "hi"})
            assert started.status_code == 202, started.text
            store.claim("w", 30)
            scraped = await http.get(f"{base}/metrics")
    finally:
        store.close()
    assert scraped.status_code == 200
    samples = [sample for family in text_string_to_metric_families(scraped.text) for sample in family.samples]

    def value(name: str, **labels: str) -> list[float]:
        return [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]

    created = value("orchestrator_store_transaction_duration_seconds_count", orchestrator_store_operation="create_run")
    assert created == [1]
    assert value("orchestrator_store_claim_lag_seconds_count", orchestrator_claim_kind="queued") == [1]


def test_without_opentelemetry_the_store_measures_nothing_and_works(tmp_path: Path) -> None:
    program = f"""
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from orchestrator.messages import UserMessage
from orchestrator.store import metrics
from orchestrator.store.runs_sql import sqlite_run_store
from orchestrator.wire.format import encode_message
store = sqlite_run_store({str(tmp_path / "runs.db")!r})
store.create_run("s1", "r1", encode_message(UserMessage("hi")))
print(len(store.claim("w", 30)), metrics.store_instruments(), "opentelemetry.metrics" in sys.modules)
store.close()
"""
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["1", "None", "False"]

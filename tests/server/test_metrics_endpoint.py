"""The opt-in ``GET /metrics``: the runs' OpenTelemetry metrics in Prometheus format, scraped over HTTP."""

from __future__ import annotations

import httpx
import pytest
import trio

pytest.importorskip("opentelemetry.exporter.prometheus", reason="the otel extra (Prometheus exporter) is not installed")

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.model import ResponseCompletedEvent, Usage
from orchestrator.observe.otel import OpenTelemetryExtension
from orchestrator.server import create_app
from tests.server.support import serving


async def test_metrics_are_scraped_in_prometheus_format_behind_the_token() -> None:
    registry = CollectorRegistry()
    meters = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    model = ScriptedModel([ResponseCompletedEvent(AssistantMessage("hello"), usage=Usage(42, 5))])
    client = await create_agent(model, extensions=[OpenTelemetryExtension(meter_provider=meters, traces=False)])
    async with serving(client, token="secret", metrics=registry) as base, httpx.AsyncClient(timeout=20) as http:
        auth = {"Authorization": "Bearer secret"}
        started = await http.post(f"{base}/sessions/s1/runs", json={"input": "hi"}, headers=auth)
        assert started.status_code == 202
        with trio.fail_after(20):
            while not (await http.get(f"{base}/runs/{started.json()['request_id']}", headers=auth)).json()["done"]:
                await trio.sleep(0.02)

        refused = await http.get(f"{base}/metrics")
        assert refused.status_code == 401
        scraped = await http.get(f"{base}/metrics", headers=auth)
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    samples = [sample for family in text_string_to_metric_families(scraped.text) for sample in family.samples]

    def value(name: str, **labels: str) -> list[float]:
        return [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]

    assert value("orchestrator_runs_ended_total", orchestrator_run_outcome="completed") == [1]
    assert value("orchestrator_runs_started_total") == [1]
    assert sorted(value("gen_ai_client_token_usage_sum")) == [5, 42]
    assert value("gen_ai_client_token_usage_count", gen_ai_token_type="input") == [1]


async def test_no_metrics_route_unless_asked_and_a_wrong_registry_is_refused() -> None:
    client = await create_agent(ScriptedModel([]))
    async with serving(client) as base, httpx.AsyncClient(timeout=20) as http:
        assert (await http.get(f"{base}/metrics")).status_code == 404
    with pytest.raises(TypeError, match="CollectorRegistry"):
        create_app(client, metrics="yes")

"""Spans exported over OTLP/HTTP to a real receiver (Arize Phoenix, from its own venv) and read back through its
API. ``scripts/test`` makes that venv once; without it the test skips and says why."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra (OTLP exporter) is not installed")

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support import asks, call

from orchestrator import AssistantMessage, ScriptedModel, create_agent, tool
from orchestrator.model import ResponseCompletedEvent, Usage
from orchestrator.observe.otel import OpenTelemetryExtension

PHOENIX_VENV = Path(
    os.environ.get("ORCHESTRATOR_PHOENIX_VENV", Path.home() / ".cache" / "orchestrator-test" / "venv-phoenix")
)
PROJECT = "orchestrator-test"
START_LIMIT = 120  # seconds for Phoenix to answer (about 12 s here): a server that never comes up fails, not hangs


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    """A Phoenix server on loopback, with its data in ``tmp_path``; yields its base URL."""
    python = PHOENIX_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no Phoenix venv at {PHOENIX_VENV} (scripts/test makes it; its install failed or did not run)")
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),  # it listens on every interface whatever PHOENIX_HOST says
        "PHOENIX_WORKING_DIR": str(tmp_path),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    }
    log = (tmp_path / "phoenix.log").open("wb")
    server = subprocess.Popen(
        [str(python), "-m", "phoenix.server.main", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_LIMIT
        while True:
            if server.poll() is not None:
                said = (tmp_path / "phoenix.log").read_text()[-2000:]
                pytest.fail(f"Phoenix exited with {server.returncode}: {said}")
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"Phoenix did not answer within {START_LIMIT} s")
            time.sleep(0.25)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key}=42"


def spans_of(base: str, expected: int) -> list[dict[str, Any]]:
    """The project's spans, once ``expected`` of them arrived (Phoenix stores them shortly after the export)."""
    deadline = time.monotonic() + 30
    while True:
        answer = httpx.get(f"{base}/v1/projects/{PROJECT}/spans", params={"limit": 100}, timeout=10)
        if answer.status_code == 200 and len(answer.json()["data"]) >= expected:
            data: list[dict[str, Any]] = answer.json()["data"]
            return data
        if time.monotonic() > deadline:
            pytest.fail(f"Phoenix holds {answer.status_code} {answer.text[:500]}, not {expected} spans")
        time.sleep(0.25)


async def test_a_request_exported_over_otlp_http_is_read_back_from_phoenix(phoenix: str) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": PROJECT}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = ScriptedModel(
        [
            ResponseCompletedEvent(asks(call("c1", "lookup", key="a")), usage=Usage(30, 4)),
            AssistantMessage("a is 42"),
        ]
    )
    agent = await create_agent(model, tools=[lookup], extensions=[OpenTelemetryExtension(provider, agent_name="main")])
    await agent.run("what is a?")
    provider.shutdown()

    spans = spans_of(phoenix, 4)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    assert sorted(by_name) == ["chat", "execute_tool lookup", "invoke_agent main"]
    (root,) = by_name["invoke_agent main"]
    root_id = root["context"]["span_id"]
    assert root.get("parent_id") is None
    assert all(s["parent_id"] == root_id for s in spans if s is not root)
    assert {s["context"]["trace_id"] for s in spans} == {root["context"]["trace_id"]}
    (tool_span,) = by_name["execute_tool lookup"]
    assert tool_span["attributes"]["gen_ai.tool.call.id"] == "c1"
    chats = sorted(by_name["chat"], key=lambda s: s["start_time"])
    assert chats[0]["attributes"]["gen_ai.usage.input_tokens"] == 30
    assert any(event["name"] == "orchestrator.transition" for event in root["events"])


async def test_a_durable_run_parked_and_resumed_by_another_worker_is_one_trace_in_phoenix(
    phoenix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator import UserMessage
    from orchestrator.cluster.webnode import StoreBackend
    from orchestrator.server.backend import RunStart
    from orchestrator.store.runs_sql import sqlite_run_store
    from tests.cluster import apps
    from tests.cluster.test_otel_segments import park_then_resume_elsewhere

    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")
    providers = []
    for _ in range(3):  # the caller's process and two workers', each exporting on its own
        provider = TracerProvider(resource=Resource.create({"openinference.project.name": PROJECT}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")))
        providers.append(provider)
    path = str(tmp_path / "cluster.db")
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    with providers[0].get_tracer("app").start_as_current_span("POST /runs") as caller:
        request_id = await web.start(RunStart("s1", UserMessage("paint")))
    await park_then_resume_elsewhere(path, web, request_id, (providers[1], providers[2]))
    for provider in providers:
        provider.shutdown()

    names = {"POST /runs", "invoke_agent a", "invoke_agent b"}
    deadline = time.monotonic() + 30
    spans = spans_of(phoenix, 3)
    while not names <= {s["name"] for s in spans}:
        assert time.monotonic() < deadline, f"Phoenix holds {sorted(s['name'] for s in spans)}"
        time.sleep(0.25)
        spans = spans_of(phoenix, 3)
    time.sleep(1.0)  # the rest of what was exported with them is stored by now
    spans = spans_of(phoenix, len(spans))
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    (first,) = by_name["invoke_agent a"]
    (second,) = by_name["invoke_agent b"]
    (root,) = by_name["POST /runs"]
    trace_id = f"{caller.get_span_context().trace_id:032x}"
    assert {s["context"]["trace_id"].removeprefix("0x") for s in spans} == {trace_id}
    for segment in (first, second):
        assert segment["parent_id"] == root["context"]["span_id"]
    known = {s["context"]["span_id"] for s in spans}
    assert all(s.get("parent_id") in known for s in spans if s is not root)  # every parent arrived

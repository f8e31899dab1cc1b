"""A durable run is one trace across parks and workers: the run store keeps its W3C trace context (the span
current where it was started, or the ``orchestrator.run`` span its first worker made), and each worker runs
its segment under it, so every ``invoke_agent`` segment span is a child of a span that was exported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator import ExternalEvent, UserMessage
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.server.backend import RunStart
from orchestrator.store.runs_sql import sqlite_run_store
from tests.cluster import apps
from tests.cluster.waits import until_final, until_parked

ROOT = Path(__file__).resolve().parents[2]


def recorded() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")


async def park_then_resume_elsewhere(
    path: str, web: StoreBackend, request_id: str, providers: tuple[TracerProvider, TracerProvider] | None = None
) -> tuple[list[ReadableSpan], ...]:
    """Worker a runs the run until it parks; worker b, another tracer provider, resumes it after the answer.

    The spans each recorded (none when ``providers`` are given: they export them elsewhere)."""
    provider_a, spans_a = recorded()
    provider_b, spans_b = recorded()
    if providers is not None:
        provider_a, provider_b = providers
    worker_a = Worker(await apps.traced_agent(provider_a, "a"), sqlite_run_store(path), name="a", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker_a.run)
            call_id = await until_parked(web.store, request_id)
            nursery.cancel_scope.cancel()
        worker_b = Worker(await apps.traced_agent(provider_b, "b"), sqlite_run_store(path), name="b", poll_seconds=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker_b.run)
            answer = ExternalEvent("ask_user_response", {"tool_call_id": call_id, "answer": "yes"})
            assert await web.deliver("s1", request_id, answer, None)
            assert await until_final(web.store, request_id) == "completed"
            nursery.cancel_scope.cancel()
    return list(spans_a.get_finished_spans()), list(spans_b.get_finished_spans())


def named(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


async def test_a_run_started_under_a_span_has_each_segment_under_that_span(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    caller_provider, caller_spans = recorded()
    with caller_provider.get_tracer("app").start_as_current_span("POST /runs") as caller:
        request_id = await web.start(RunStart("s1", UserMessage("paint")))
    record = web.store.run(request_id)
    assert record is not None and record.trace_context is not None
    assert record.trace_context["traceparent"].split("-")[1] == f"{caller.get_span_context().trace_id:032x}"

    spans_a, spans_b = await park_then_resume_elsewhere(path, web, request_id)

    first, second = named(spans_a, "invoke_agent a"), named(spans_b, "invoke_agent b")
    assert (first.attributes or {})["orchestrator.run.outcome"] == "parked"
    assert (second.attributes or {})["orchestrator.run.outcome"] == "completed"
    assert "orchestrator.run.resumed" in [e.name for e in second.events]
    caller_id = caller.get_span_context()
    for segment in (first, second):  # both children of the caller's span, which the caller exported
        assert segment.parent is not None and segment.parent.span_id == caller_id.span_id
    assert {s.context.trace_id for s in [*spans_a, *spans_b]} == {caller_id.trace_id}
    assert not [s for s in [*spans_a, *spans_b] if s.name == "orchestrator.run"]  # no anchor of its own
    assert [s.name for s in caller_spans.get_finished_spans()] == ["POST /runs"]


async def test_a_run_started_with_no_span_is_traced_under_the_span_its_first_worker_made(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    request_id = await web.start(RunStart("s1", UserMessage("paint")))
    assert (record := web.store.run(request_id)) is not None and record.trace_context is None

    spans_a, spans_b = await park_then_resume_elsewhere(path, web, request_id)

    anchor = named(spans_a, "orchestrator.run")  # made, ended and exported by worker a before its segment
    assert anchor.parent is None
    assert (anchor.attributes or {})["orchestrator.request.id"] == request_id
    stored = web.store.run(request_id)
    assert stored is not None and stored.trace_context is not None
    assert stored.trace_context["traceparent"].split("-")[2] == f"{anchor.context.span_id:016x}"
    first, second = named(spans_a, "invoke_agent a"), named(spans_b, "invoke_agent b")
    for segment in (first, second):
        assert segment.parent is not None and segment.parent.span_id == anchor.context.span_id
    assert {s.context.trace_id for s in [*spans_a, *spans_b]} == {anchor.context.trace_id}
    assert not [s for s in spans_b if s.name == "orchestrator.run"]  # worker b found the run's trace stored


async def test_after_kill_9_of_a_worker_every_segment_hangs_under_an_exported_span(tmp_path: Path) -> None:
    """Worker a (a process) is killed -9 inside a tool call: its segment span never ends, never arrives.
    Worker b takes the run over: its segment's parent is the anchor worker a exported before it began."""
    path = str(tmp_path / "cluster.db")
    lines = tmp_path / "spans-a.jsonl"
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    request_id = await web.start(RunStart("s1", UserMessage("slow paint")))
    env = {**os.environ, "ORCHESTRATOR_TEST_SPANS": str(lines), "ORCHESTRATOR_TEST_MARKS": str(apps.MARKS)}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "orchestrator", "worker", "--app", "tests.cluster.apps:traced_agent"]
    command += ["--db", f"sqlite:///{path}", "--name", "a", "--lease-seconds", "1"]
    with (tmp_path / "worker-a.log").open("wb") as log:
        worker_a = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        with trio.fail_after(60):
            while not (apps.MARKS / "record.log").exists():  # inside the call: it holds 3 s
                assert worker_a.poll() is None, (tmp_path / "worker-a.log").read_text()
                await trio.sleep(0.05)
    finally:
        os.kill(worker_a.pid, signal.SIGKILL)
        worker_a.wait(10)

    provider_b, exporter_b = recorded()
    worker_b = Worker(await apps.traced_agent(provider_b, "b"), sqlite_run_store(path), name="b", poll_seconds=0.05)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker_b.run)
            call_id = await until_parked(web.store, request_id)
            answer = ExternalEvent("ask_user_response", {"tool_call_id": call_id, "answer": "yes"})
            assert await web.deliver("s1", request_id, answer, None)
            assert await until_final(web.store, request_id) == "completed"
            nursery.cancel_scope.cancel()

    spans_b = exporter_b.get_finished_spans()
    from_a: list[dict[str, Any]] = [json.loads(line) for line in lines.read_text().splitlines()]
    assert "orchestrator.run" in [s["name"] for s in from_a]
    assert "invoke_agent traced" not in [s["name"] for s in from_a]  # cut off by the kill: never exported
    arrived = {s["context"]["span_id"] for s in from_a} | {f"0x{s.context.span_id:016x}" for s in spans_b}
    segments = [s for s in spans_b if s.name.startswith("invoke_agent")]
    assert len(segments) == 2  # one by the takeover until the run parked, one after the answer
    for segment in segments:
        assert segment.parent is not None and f"0x{segment.parent.span_id:016x}" in arrived
    (anchor,) = [s for s in from_a if s["name"] == "orchestrator.run"]
    assert {f"0x{s.context.trace_id:032x}" for s in spans_b} == {anchor["context"]["trace_id"]}

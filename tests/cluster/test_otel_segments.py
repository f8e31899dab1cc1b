"""A run parked by one worker and resumed by another is two ``invoke_agent`` segments of one trace, when the
resuming worker is handed the carrier the first one gave."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
import trio

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator import AgentClient, AgentRunContext, ExternalEvent, ScriptedModel, UserMessage, create_agent
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.events import AgentEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.base import AgentExtension
from orchestrator.observe.otel import OpenTelemetryExtension
from orchestrator.store.runs_sql import sqlite_run_store
from tests.cluster import apps

STORED: dict[str, dict[str, str]] = {}  # what a run store would keep with each run: request id -> carrier


class KeepCarrier(AgentExtension):
    """Stands in for the run store: keeps the trace carrier of each run's first segment."""

    event_names = frozenset({"transition"})

    def __init__(self, otel: OpenTelemetryExtension) -> None:
        self.otel = otel

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        if context.request_id not in STORED:
            STORED[context.request_id] = self.otel.carrier(context.request_id)


def stored(context: AgentRunContext) -> Mapping[str, str] | None:
    return STORED.get(context.request_id)


async def traced_agent(provider: TracerProvider, worker: str) -> AgentClient:
    otel = OpenTelemetryExtension(provider, agent_name=worker, resume_carrier=stored)
    return await create_agent(
        ScriptedModel([apps._step], repeat_last=True),
        tools=[apps.record, apps.lookup],
        extensions=[otel, KeepCarrier(otel), AskUserExtension()],
    )


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "MARKS", tmp_path / "marks")
    STORED.clear()


async def test_the_resumed_segment_is_in_the_first_segments_trace_and_links_it(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    path = str(tmp_path / "cluster.db")
    web, store_a = StoreBackend(sqlite_run_store(path), poll_seconds=0.02), sqlite_run_store(path)
    worker_a = Worker(await traced_agent(provider, "a"), store_a, name="a", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker_a.run)
            request_id = await web.start("s1", UserMessage("paint"), None)
            while not any(s.name == "invoke_agent a" for s in exporter.get_finished_spans()):
                await trio.sleep(0.02)  # worker a ran the run until it parked on its question
            nursery.cancel_scope.cancel()
        store_b = sqlite_run_store(path)
        worker_b = Worker(await traced_agent(provider, "b"), store_b, name="b", poll_seconds=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker_b.run)
            (waiting,) = [e for e in first_segment(exporter).events if e.name == "orchestrator.run.parked"]
            (call_id,) = (waiting.attributes or {})["orchestrator.waiting"]  # type: ignore[misc]
            answer = ExternalEvent("ask_user_response", {"tool_call_id": call_id, "answer": "yes"})
            assert await web.deliver("s1", request_id, answer, None)
            while not any(s.name == "invoke_agent b" for s in exporter.get_finished_spans()):
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()

    spans = exporter.get_finished_spans()
    (first,) = [s for s in spans if s.name == "invoke_agent a"]
    (second,) = [s for s in spans if s.name == "invoke_agent b"]
    assert (first.attributes or {})["orchestrator.run.outcome"] == "parked"
    assert (second.attributes or {})["orchestrator.run.outcome"] == "completed"
    assert "orchestrator.run.parked" in [e.name for e in first.events]
    assert "orchestrator.run.resumed" in [e.name for e in second.events]
    # The first segment was a root (no span was current in worker a), so the second goes under it, in its trace.
    assert first.parent is None
    assert second.context.trace_id == first.context.trace_id
    assert second.parent is not None and second.parent.span_id == first.context.span_id
    assert {s.context.trace_id for s in spans} == {first.context.trace_id}


def first_segment(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent a"]
    return span



"""OpenTelemetry metrics of requests, read back from the SDK's in-memory metric reader."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is not installed")

import trio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from support import asks, call

from orchestrator import AgentRunConfig, AssistantMessage, ExternalEvent, ScriptedModel, create_agent, tool
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.tool_approval import ToolApprovalExtension, ToolPolicy
from orchestrator.model import ModelRequest, ResponseCompletedEvent, Usage
from orchestrator.observe.otel import OpenTelemetryExtension

LIMIT = 20


@tool
async def slow_lookup(key: str) -> str:
    """Look a key up, slowly."""
    await trio.sleep(0.05)
    return f"{key}=42"


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point of every metric, by metric name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def where(found: dict[str, list[Any]], name: str, **attributes: Any) -> list[Any]:
    return [p for p in found.get(name, []) if all(p.attributes.get(k) == v for k, v in attributes.items())]


async def answer_all(client: Any, text: str, session: str) -> None:
    """One streamed request; approvals are granted and questions answered after a short while."""
    with trio.fail_after(LIMIT):
        async for event in client.stream(text, config=AgentRunConfig(session)):
            if event.name == "tool_approval":
                await trio.sleep(0.1)
                payload = {"tool_call_id": event.payload["tool_call_id"], "approved": True}
            elif event.name == "ask_user":
                await trio.sleep(0.1)
                payload = {"tool_call_id": event.payload["tool_call_id"], "answer": "blue"}
            else:
                continue
            client.agent.emit_external_event(
                ExternalEvent(event.payload["response_event"], payload), config=AgentRunConfig(session)
            )


async def test_runs_model_calls_tokens_tools_and_waits_are_measured() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    model = ScriptedModel(
        [
            ResponseCompletedEvent(asks(call("c1", "slow_lookup", key="a")), usage=Usage(100, 10)),
            ResponseCompletedEvent(
                asks(call("q1", "ask_user", question="Colour?", options=["blue"])), usage=Usage(150, 5)
            ),
            ResponseCompletedEvent(AssistantMessage("done"), usage=Usage(200, 20)),
        ]
    )
    agent = await create_agent(
        model,
        tools=[slow_lookup],
        extensions=[
            OpenTelemetryExtension(meter_provider=meters, agent_name="main", traces=False),
            ToolApprovalExtension(ToolPolicy({"slow_lookup": "ask"})),
            AskUserExtension(),
        ],
    )
    await answer_all(agent, "go", "s")

    def broken(request: ModelRequest) -> AssistantMessage:
        raise RuntimeError("down")

    failing = await create_agent(
        ScriptedModel([broken]), extensions=[OpenTelemetryExtension(meter_provider=meters, agent_name="main")]
    )
    with pytest.raises(RuntimeError):
        await failing.run("go", config=AgentRunConfig("t"))

    found = points(reader)
    (started,) = where(found, "orchestrator.runs.started")
    assert started.value == 2
    assert where(found, "orchestrator.runs.ended", **{"orchestrator.run.outcome": "completed"})[0].value == 1
    assert where(found, "orchestrator.runs.ended", **{"orchestrator.run.outcome": "failed"})[0].value == 1
    assert [p.value for p in where(found, "orchestrator.runs.running")] == [0]

    input_tokens = where(found, "gen_ai.client.token.usage", **{"gen_ai.token.type": "input"})
    output_tokens = where(found, "gen_ai.client.token.usage", **{"gen_ai.token.type": "output"})
    assert (input_tokens[0].count, input_tokens[0].sum) == (3, 450)
    assert (output_tokens[0].count, output_tokens[0].sum) == (3, 35)
    assert input_tokens[0].attributes["gen_ai.operation.name"] == "chat"

    durations = found["gen_ai.client.operation.duration"]
    assert sum(p.count for p in durations if "error.type" not in p.attributes) == 3
    assert [p.count for p in durations if p.attributes.get("error.type") == "RuntimeError"] == [1]

    (tool_duration,) = where(found, "gen_ai.execute_tool.duration", **{"gen_ai.tool.name": "slow_lookup"})
    assert tool_duration.count == 1 and tool_duration.sum >= 0.05
    (approval,) = where(found, "orchestrator.wait.duration", **{"orchestrator.wait.kind": "approval"})
    (question,) = where(found, "orchestrator.wait.duration", **{"orchestrator.wait.kind": "question"})
    assert approval.count == question.count == 1
    assert approval.sum >= 0.1 and question.sum >= 0.1

"""OpenTelemetry traces of requests: the span tree, GenAI attributes and span events, read from the SDK's
in-memory exporter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is not installed")

import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from support import asks, call

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ScriptedModel,
    agent_tool,
    create_agent,
    tool,
)
from orchestrator.extensions.tool_approval import ToolApprovalExtension, ToolPolicy
from orchestrator.model import ModelRequest, ResponseCompletedEvent, Usage
from orchestrator.observe.otel import OpenTelemetryExtension

LIMIT = 20  # seconds: a hang fails the test instead of blocking the suite


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key}=42"


class Broken(Exception):
    """The model's failure in the failing request."""


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def parent_of(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    return next((s for s in spans if s.context.span_id == span.parent.span_id), None)


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def drive(client: Any, text: str, session: str) -> None:
    """One streamed request; every approval it asks for is granted."""
    with trio.fail_after(LIMIT):
        async for event in client.stream(text, config=AgentRunConfig(session)):
            if event.name == "tool_approval" and event.session_id == session:
                answer = {"tool_call_id": event.payload["tool_call_id"], "approved": True}
                taken = client.agent.emit_external_event(
                    ExternalEvent(event.payload["response_event"], answer), config=AgentRunConfig(session)
                )
                assert taken == ["ToolApprovalExtension"]


async def test_a_request_with_a_tool_an_approval_and_a_subagent_is_one_span_tree() -> None:
    provider, exporter = tracing()
    child = await create_agent(
        ScriptedModel([asks(call("k1", "lookup", key="x")), AssistantMessage("x is 42")]),
        tools=[lookup],
        extensions=[OpenTelemetryExtension(provider, agent_name="researcher")],
    )
    parent_model = ScriptedModel(
        [
            ResponseCompletedEvent(asks(call("c1", "lookup", key="a")), usage=Usage(120, 7)),
            asks(call("r1", "research", task="find x")),
            ResponseCompletedEvent(AssistantMessage("done"), usage=Usage(200, 3)),
        ]
    )
    parent = await create_agent(
        parent_model,
        tools=[lookup],
        extensions=[
            OpenTelemetryExtension(provider, agent_name="main"),
            agent_tool(child, name="research", description="Research."),
            ToolApprovalExtension(ToolPolicy({"lookup": "ask"})),
        ],
    )

    await drive(parent, "go", "s")

    spans = exporter.get_finished_spans()
    root = named(spans, "invoke_agent main")
    assert len(root) == 1 and root[0].parent is None
    main = root[0]
    assert main.attributes is not None
    assert main.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert main.attributes["gen_ai.agent.name"] == "main"
    assert main.attributes["gen_ai.conversation.id"] == "s"
    assert main.attributes["orchestrator.run.outcome"] == "completed"
    assert main.status.status_code is StatusCode.UNSET

    chats = [s for s in named(spans, "chat") if parent_of(s, spans) is main]
    assert len(chats) == 3
    first, last = chats[0].attributes, chats[-1].attributes
    assert first is not None and last is not None
    assert first["gen_ai.operation.name"] == "chat"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (120, 7)
    assert first["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert last["gen_ai.response.finish_reasons"] == ("stop",)
    assert "gen_ai.usage.input_tokens" not in (chats[1].attributes or {})  # that answer reported no usage

    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name.startswith("execute_tool")}  # type: ignore[index]
    assert set(tools) == {"c1", "r1", "k1"}
    assert tools["c1"].name == "execute_tool lookup" and parent_of(tools["c1"], spans) is main
    assert (tools["c1"].attributes or {})["gen_ai.tool.name"] == "lookup"
    assert parent_of(tools["r1"], spans) is main

    # The subagent's request is an invoke_agent under the call that ran it, with its own chats and tools.
    researcher = named(spans, "invoke_agent researcher")
    assert len(researcher) == 1
    assert parent_of(researcher[0], spans) is tools["r1"]
    assert parent_of(tools["k1"], spans) is researcher[0]
    assert len([s for s in spans if parent_of(s, spans) is researcher[0] and s.name == "chat"]) == 2
    assert {s.context.trace_id for s in spans} == {main.context.trace_id}

    # Transitions and the approval's wait are span events of the request's span.
    transitions = [e for e in main.events if e.name == "orchestrator.transition"]
    keys = {f"orchestrator.{key}" for key in ("machine", "region", "source", "trigger", "dest")}
    assert all(set((e.attributes or {}).keys()) == keys for e in transitions)
    triggers = [(e.attributes or {})["orchestrator.trigger"] for e in transitions]
    assert triggers[0] == "start" and triggers[-1] == "complete"
    taken = [(e.attributes or {}) for e in transitions]
    assert ("tool_approval", "approve") in [(a["orchestrator.machine"], a["orchestrator.trigger"]) for a in taken]
    names = [e.name for e in main.events]
    waiting = names.index("orchestrator.approval.waiting")
    assert names.index("orchestrator.approval.answered") > waiting
    assert dict(main.events[waiting].attributes or {}) == {"gen_ai.tool.call.id": "c1", "gen_ai.tool.name": "lookup"}


async def test_a_failed_model_call_is_an_error_on_its_chat_span_and_on_the_request() -> None:
    provider, exporter = tracing()

    def fail(request: ModelRequest) -> AssistantMessage:
        raise Broken("the provider is down")

    agent = await create_agent(ScriptedModel([fail]), extensions=[OpenTelemetryExtension(provider)])
    with pytest.raises(Broken):
        await drive(agent, "go", "s")

    spans = exporter.get_finished_spans()
    (request,) = named(spans, "invoke_agent")
    (chat,) = named(spans, "chat")
    assert parent_of(chat, spans) is request
    for span in (request, chat):
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "Broken"
        (exception,) = [e for e in span.events if e.name == "exception"]
        assert (exception.attributes or {})["exception.message"] == "the provider is down"
    assert (request.attributes or {})["orchestrator.run.outcome"] == "failed"


async def test_a_span_the_caller_opened_is_the_parent_of_the_request_and_current_in_its_task() -> None:
    provider, exporter = tracing()
    seen: list[int] = []

    def answer(request: ModelRequest) -> AssistantMessage:
        seen.append(trace.get_current_span().get_span_context().trace_id)
        return AssistantMessage("hi")

    tracer = provider.get_tracer("caller")
    agent = await create_agent(ScriptedModel([answer, answer]), extensions=[OpenTelemetryExtension(provider)])
    with tracer.start_as_current_span("handle HTTP request") as outer:
        await drive(agent, "streamed", "s1")
        handle = await agent.start("started", config=AgentRunConfig("s2"))
        with trio.fail_after(LIMIT):
            await handle.wait()

    spans = exporter.get_finished_spans()
    requests = named(spans, "invoke_agent")
    assert len(requests) == 2
    assert all(parent_of(s, spans) is not None and parent_of(s, spans).name == "handle HTTP request" for s in requests)  # type: ignore[union-attr]
    # The request's own task (a system task) runs in the caller's context: the model saw the caller's span.
    assert seen == [outer.get_span_context().trace_id] * 2


async def test_content_is_left_out_unless_asked_for() -> None:
    for capture in (False, True):
        provider, exporter = tracing()
        agent = await create_agent(
            ScriptedModel([asks(call("c1", "lookup", key="secret")), AssistantMessage("the answer")]),
            tools=[lookup],
            extensions=[OpenTelemetryExtension(provider, capture_content=capture)],
        )
        await drive(agent, "my private question", "s")
        text = " ".join(str(dict(s.attributes or {})) for s in exporter.get_finished_spans())
        for private in ("my private question", "secret", "the answer", "secret=42"):
            assert (private in text) is capture, (capture, private)


async def test_a_resumed_segment_starts_under_the_runs_first_parent_and_links_the_segment_that_parked() -> None:
    provider, exporter = tracing()
    kept: dict[str, str] = {}
    extension = OpenTelemetryExtension(provider)

    def remember(request: ModelRequest) -> AssistantMessage:
        (request_id,) = list(extension._requests)
        kept.update(extension.carrier(request_id))
        return AssistantMessage("first segment")

    tracer = provider.get_tracer("caller")
    agent = await create_agent(ScriptedModel([remember]), extensions=[extension])
    with tracer.start_as_current_span("caller"):
        await drive(agent, "go", "s")
    assert set(kept) == {"traceparent", "parent_traceparent"}

    resumed = await create_agent(
        ScriptedModel([AssistantMessage("second segment")]),
        extensions=[OpenTelemetryExtension(provider, resume_carrier=lambda context: kept)],
    )
    await drive(resumed, "go on", "s")  # elsewhere: no span is current here

    spans = exporter.get_finished_spans()
    caller = named(spans, "caller")[0]
    first, second = named(spans, "invoke_agent")
    assert parent_of(first, spans) is caller and parent_of(second, spans) is caller
    assert [link.context.span_id for link in second.links] == [first.context.span_id]


async def test_spans_a_tool_opens_in_a_thread_or_a_child_task_nest_under_its_execute_tool_span() -> None:
    provider, exporter = tracing()
    tracer = provider.get_tracer("tool code")

    def in_thread() -> None:
        with tracer.start_as_current_span("work in a thread"):
            pass

    async def in_child() -> None:
        with tracer.start_as_current_span("work in a child task"):
            await trio.sleep(0)

    @tool
    async def fan_out() -> str:
        """Work in a thread and in a child task."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(in_child)
            nursery.start_soon(trio.to_thread.run_sync, in_thread)
        return "done"

    @tool
    def blocking() -> str:
        """A sync tool: it runs in a worker thread."""
        in_thread()
        return "done"

    model = ScriptedModel([asks(call("c1", "fan_out"), call("c2", "blocking")), AssistantMessage("ok")])
    agent = await create_agent(model, tools=[fan_out, blocking], extensions=[OpenTelemetryExtension(provider)])
    await drive(agent, "go", "s")

    spans = exporter.get_finished_spans()
    fan, block = named(spans, "execute_tool fan_out")[0], named(spans, "execute_tool blocking")[0]
    assert {parent_of(s, spans) for s in named(spans, "work in a child task")} == {fan}
    threads = named(spans, "work in a thread")
    assert len(threads) == 2 and {parent_of(s, spans) for s in threads} == {fan, block}


async def test_a_cancelled_request_ends_its_spans_with_an_error_status() -> None:
    provider, exporter = tracing()

    @tool
    async def hang() -> str:
        """Never returns."""
        await trio.sleep_forever()
        return ""

    extension = OpenTelemetryExtension(provider)
    agent = await create_agent(ScriptedModel([asks(call("c1", "hang"))]), tools=[hang], extensions=[extension])
    handle = await agent.start("go", config=AgentRunConfig("s"))
    with trio.fail_after(LIMIT):
        while not named(exporter.get_finished_spans(), "chat"):
            await trio.sleep(0.01)
        handle.cancel()
        await handle.wait()

    spans = exporter.get_finished_spans()
    (request,) = named(spans, "invoke_agent")
    (tool_span,) = named(spans, "execute_tool hang")
    assert (request.attributes or {})["orchestrator.run.outcome"] == "cancelled"
    assert request.status.status_code is StatusCode.ERROR
    assert tool_span.status.status_code is StatusCode.ERROR and tool_span.end_time is not None
    assert extension._requests == {}  # nothing kept of an ended request

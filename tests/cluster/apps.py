"""Agents the cluster tests run in workers (``--app tests.cluster.apps:ATTR``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import trio

from orchestrator import AgentClient, AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, create_agent, tool
from orchestrator.extensions.ask_user import AskUserExtension
from tests.support import asks, call

MARKS = Path(os.environ.get("ORCHESTRATOR_TEST_MARKS", "/tmp/orchestrator-marks"))


def _results(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


@tool(thread=True)
def record(label: str, hold: float = 0.0) -> str:
    """Record that this call ran (a side effect a test can count), holding it ``hold`` seconds.

    Args:
        label: what to record
        hold: seconds to wait before returning
    """
    MARKS.mkdir(parents=True, exist_ok=True)
    with (MARKS / "record.log").open("a", encoding="utf-8") as log:
        log.write(label + "\n")
    if hold:
        import time

        time.sleep(hold)
    return f"recorded {label}"


@tool(idempotent=True)
async def lookup(key: str) -> str:
    """Look a key up (safe to run twice).

    Args:
        key: what to look up
    """
    await trio.sleep(0)
    return f"value of {key}"


def _step(request: ModelRequest) -> AssistantMessage:
    """record -> ask_user -> answer, by what the turn has so far."""
    results = _results(request)
    user = [m for m in request.messages if m.role == "user"][-1].text
    names = [r.name for r in results]
    turn = len(request.messages)
    if "record" not in names:
        hold = 3.0 if "slow" in user else 0.0
        return asks(
            call(f"r{turn}", "record", label=user, hold=hold), call(f"l{turn}", "lookup", key=user), text="Working."
        )
    if "ask_user" not in names:
        return asks(call(f"q{turn}", "ask_user", question=f"Go on with {user}?", options=["yes", "no"]))
    answer = [r for r in results if r.name == "ask_user"][-1].content
    return AssistantMessage(f"Done with {user}: {answer}.")


async def approval_agent() -> AgentClient:
    """Calls ``record`` and ``lookup``, asks the user, then answers."""
    return await create_agent(
        ScriptedModel([_step], repeat_last=True), tools=[record, lookup], extensions=[AskUserExtension()]
    )


async def traced_agent(provider: object = None, name: str = "traced") -> AgentClient:
    """``approval_agent`` with OpenTelemetry spans: to ``provider``, or else as JSON lines (one span a line)
    appended to the file ``ORCHESTRATOR_TEST_SPANS`` names, each exported as it ends."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    from orchestrator.observe.otel import OpenTelemetryExtension

    if provider is None:
        spans = open(os.environ["ORCHESTRATOR_TEST_SPANS"], "a", encoding="utf-8")  # noqa: SIM115 (the process's)

        def line(span: ReadableSpan) -> str:
            return span.to_json(indent=None) + "\n"

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=spans, formatter=line)))
    assert isinstance(provider, TracerProvider)
    return await create_agent(
        ScriptedModel([_step], repeat_last=True),
        tools=[record, lookup],
        extensions=[OpenTelemetryExtension(provider, agent_name=name), AskUserExtension()],
    )


@dataclasses.dataclass
class Verdict:
    """The answer ``settings_agent``'s runs are held to."""

    winner: str
    score: int


def _judge(request: ModelRequest) -> AssistantMessage:
    """lookup (which waits for an approval) -> an answer missing ``score`` -> after the retry prompt, a full one."""
    if not _results(request):
        return asks(call("l1", "lookup", key="race"))
    last = request.messages[-1]
    if last.role == "user" and "does not match" in last.text:
        return AssistantMessage('{"winner": "ada", "score": 3}')
    return AssistantMessage('{"winner": "ada"}')


async def settings_agent() -> AgentClient:
    """Asks for approval of every ``lookup``; its answers are checked against the run's output type, if any."""
    from orchestrator.extensions.tool_approval import ToolApprovalExtension

    return await create_agent(
        ScriptedModel([_judge], repeat_last=True), tools=[lookup], extensions=[ToolApprovalExtension({"lookup": "ask"})]
    )


LONG_LEASE_SECONDS = 60.0
"""The lease of ``long_lease_web_node``'s carrier: far longer than a test waits for a run handed back."""


def long_lease_web_node() -> object:
    """``web_node()`` from the environment (``uvicorn --factory``), its carrier's leases lasting 60 s and its
    warnings (a drain, a run handed back) written to stderr."""
    import logging

    from orchestrator.cluster.asgi import web_node
    from orchestrator.cluster.carrier import CarrierSettings

    logging.getLogger("orchestrator.cluster").addHandler(logging.StreamHandler())
    return web_node(carrying=CarrierSettings(lease_seconds=LONG_LEASE_SECONDS))

"""The trace a web node draws of a run a worker carried has the run's subagent requests nested in it, each with
its own machine path, exactly as the in-process trace of the same request draws them."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from orchestrator import (
    AgentClient,
    AgentRunConfig,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    UserMessage,
    create_agent,
)
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.extensions.subagent import agent_tool
from orchestrator.observe.trace import trace_mermaid
from orchestrator.server.backend import RunStart
from orchestrator.store.runs_sql import sqlite_run_store
from tests.cluster import apps
from tests.cluster.waits import until_final
from tests.server.support import serving
from tests.support import asks, call


def _answered(request: ModelRequest) -> bool:
    return any(message.role == "tool" for message in request.messages)


def _parent(request: ModelRequest) -> AssistantMessage:
    return AssistantMessage("done") if _answered(request) else asks(call("c1", "research", task="dig"))


def _researcher(request: ModelRequest) -> AssistantMessage:
    if _answered(request):
        return AssistantMessage("found")
    return asks(call("r1", "lookup", key="x"), call("f1", "fact", task="check"))


async def agents() -> AgentClient:
    """parent -> research (a subagent, which looks up and asks its own subagent) -> fact."""
    fact = await create_agent(ScriptedModel([AssistantMessage("true")], repeat_last=True))
    research = await create_agent(
        ScriptedModel([_researcher], repeat_last=True),
        tools=[apps.lookup],
        extensions=[agent_tool(fact, name="fact", description="Check a fact.")],
    )
    return await create_agent(
        ScriptedModel([_parent], repeat_last=True),
        extensions=[agent_tool(research, name="research", description="Research a task.")],
    )


async def test_a_workers_run_trace_nests_its_subagents_as_the_in_process_trace_does(tmp_path: Path) -> None:
    local = await agents()
    await local.run("go", config=AgentRunConfig("s1"))
    drawn_here = local.agent.trace("s1")

    path = str(tmp_path / "cluster.db")
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    request_id = await web.start(RunStart("s1", UserMessage("go")))
    worker = Worker(await agents(), sqlite_run_store(path), name="w", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            assert await until_final(web.store, request_id) == "completed"
            nursery.cancel_scope.cancel()

    (research,) = await web.child_traces(request_id)
    assert (research.label, research.session_id, research.tool_call_id) == ("research c1", "s1:c1", "c1")
    assert [(s.source, s.dest) for s in research.steps][:2] == [("idle", "setup"), ("setup", "awaiting_model")]
    assert research.steps[-1].dest == "completed"
    (fact,) = research.children
    assert (fact.label, fact.session_id) == ("fact f1", "s1:c1:f1")
    assert fact.steps[-1].dest == "completed" and fact.children == ()
    drawn = trace_mermaid(await web.transitions(request_id), children=await web.child_traces(request_id))
    assert 'subgraph c1_machine["research c1 · session s1:c1"]' in drawn
    assert 'subgraph c1_c1_machine["fact f1 · session s1:c1:f1"]' in drawn
    assert drawn == drawn_here
    async with httpx.AsyncClient(timeout=10) as http, serving(web) as base:  # type: ignore[arg-type]
        served = await http.get(f"{base}/runs/{request_id}/trace")
    assert served.status_code == 200 and served.text == drawn_here

"""Subagents: an agent offered as a tool runs child requests inside the parent's call."""

from __future__ import annotations

import gc
import re
import weakref
from typing import Any

import pytest
import trio
from support import asks, call
from test_diagrams import classes, highlighted

from machines.subagent import SUBAGENT
from orchestrator import (
    AgentClient,
    AgentEvent,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    ScriptedModel,
    SubagentCompletedEvent,
    SubAgentExtension,
    SubagentStartedEvent,
    ToolMessage,
    ToolStatus,
    UserMessage,
    agent_tool,
    create_agent,
    decode_event,
    encode_event,
    tool,
)
from orchestrator.events import TransitionEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.subagent import MAX_DEPTH, child_session_id, current_depth
from orchestrator.extensions.tool_approval import ToolApprovalExtension
from orchestrator.history import InMemoryHistory
from orchestrator.observe.trace import steps_from_events

LIMIT = 20  # seconds: a hang fails the test instead of blocking the suite


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key}=42"


@tool
async def hang() -> str:
    """Never returns."""
    await trio.sleep_forever()
    return ""


@tool
def depth_here() -> int:
    """How deep the call runs."""
    return current_depth()


async def collect(client: AgentClient, text: str, session: str = "s1") -> list[AgentEvent]:
    events: list[AgentEvent] = []
    with trio.fail_after(LIMIT):
        async for event in client.stream(text, config=AgentRunConfig(session)):
            events.append(event)
    return events


def of(events: list[AgentEvent], session: str) -> list[AgentEvent]:
    return [e for e in events if e.session_id == session]


def subagent_edges(events: list[AgentEvent]) -> list[tuple[str, str, str]]:
    return [(e.source, e.trigger, e.dest) for e in events if isinstance(e, TransitionEvent) and e.machine == "subagent"]


async def researcher(*steps: AssistantMessage, **options: Any) -> AgentClient:
    return await create_agent(ScriptedModel(list(steps)), system_prompt="You research.", **options)


async def test_a_child_request_answers_the_parents_call_and_its_events_are_forwarded_in_order() -> None:
    child = await researcher(asks(call("k1", "lookup", key="x")), AssistantMessage("x is 42"), tools=[lookup])
    parent_model = ScriptedModel([asks(call("r1", "research", task="find x")), AssistantMessage("done")])
    parent = await create_agent(parent_model, extensions=[agent_tool(child, name="research", description="Research.")])

    events = await collect(parent, "go")

    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    started = [e for e in events if isinstance(e, SubagentStartedEvent)]
    completed = [e for e in events if isinstance(e, SubagentCompletedEvent)]
    assert len(started) == len(completed) == 1
    assert (started[0].session_id, started[0].tool_call_id, started[0].agent) == ("s1", "r1", "research")
    assert started[0].child_session_id == child_session_id("s1", "r1") == "s1:r1"
    assert started[0].depth == 1
    assert (completed[0].outcome, completed[0].result) == ("completed", "x is 42")

    # Every child event sits between subagent_started and subagent_completed, under the child's ids.
    first, last = events.index(started[0]), events.index(completed[0])
    inside = events[first + 1 : last]
    child_events = [e for e in inside if e.session_id == "s1:r1"]
    assert child_events and child_events == of(events, "s1:r1")
    assert {e.request_id for e in child_events} == {started[0].child_request_id}
    assert [e.name for e in child_events][:2] == ["transition", "run_started"]
    assert child_events[-1].name == "run_completed"
    assert [e.name for e in inside if e.session_id == "s1"] == ["transition"]  # running -> completed
    tool_done = [e for e in of(events, "s1:r1") if e.name == "tool_completed"]
    assert [e.payload["result"].content for e in tool_done] == ["x=42"]
    parent_tool = [e for e in of(events, "s1") if e.name == "tool_completed"]
    assert parent_tool[0].payload["result"] == ToolMessage("r1", "research", "x is 42", ToolStatus.SUCCEEDED)
    assert events.index(parent_tool[0]) == last + 1
    assert subagent_edges(events) == [("checking", "start", "running"), ("running", "complete", "completed")]

    # The child saw the task as its input; the parent's model read the child's answer.
    assert child.agent.model.requests[0].messages[-1] == UserMessage("find x")  # type: ignore[attr-defined]
    assert parent_model.requests[1].messages[-1] == ToolMessage("r1", "research", "x is 42", ToolStatus.SUCCEEDED)
    assert [s.dest for s in child.transitions("s1:r1")][-1] == "completed"
    assert child.agent.running() == [] and parent.agent.running() == []

    # A stream's own path and its child's are told apart by session.
    own = [step for step in steps_from_events(events, "s1") if step.machine == "request"]
    assert own == parent.transitions("s1")
    assert steps_from_events(events, "s1:r1") == child.transitions("s1:r1")

    # What the wire carries is enough to link every child event to the parent's call.
    for event in events:
        assert decode_event(encode_event(event)) == event


async def test_a_parent_without_a_consumer_still_gets_the_answer() -> None:
    child = await researcher(AssistantMessage("quiet answer"))
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="t")), AssistantMessage("ok")]),
        extensions=[agent_tool(child.agent, name="research", description="Research.")],
    )
    with trio.fail_after(LIMIT):
        answer = await parent.run("go", config=AgentRunConfig("quiet"))
    assert answer.content == "ok"
    assert [s.dest for s in child.transitions("quiet:r1")][-1] == "completed"


async def test_parallel_subagent_calls_run_their_own_child_sessions() -> None:
    def answer(request: Any) -> AssistantMessage:
        task = request.messages[-1].content
        return AssistantMessage(f"answer to {task}")

    child = await create_agent(ScriptedModel([answer, answer]))
    parent = await create_agent(
        ScriptedModel(
            [asks(call("a", "research", task="one"), call("b", "research", task="two")), AssistantMessage("")]
        ),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    events = await collect(parent, "go")
    results = {
        e.payload["call"].id: e.payload["result"].content for e in of(events, "s1") if e.name == "tool_completed"
    }
    assert results == {"a": "answer to one", "b": "answer to two"}
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    for session in ("s1:a", "s1:b"):
        assert of(events, session)[-1].name == "run_completed"


# questions inside the child --------------------------------------------------


async def test_ask_user_inside_the_child_reaches_the_parents_consumer_and_is_answered_on_the_child_session() -> None:
    child = await researcher(
        asks(call("q1", "ask_user", question="Which region?", options=["eu", "us"])),
        AssistantMessage("deploying to eu"),
        extensions=[AskUserExtension()],
    )
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="deploy")), AssistantMessage("deployed")]),
        extensions=[agent_tool(child, name="research", description="Research."), AskUserExtension()],
    )
    events: list[AgentEvent] = []
    with trio.fail_after(LIMIT):
        async for event in parent.stream("go", config=AgentRunConfig("s1")):
            events.append(event)
            if event.name != "ask_user":
                continue
            assert event.session_id == "s1:r1"
            waiting = parent.pending()
            assert [(p.session_id, p.tool_call_id, p.event) for p in waiting] == [("s1:r1", "q1", "ask_user")]
            assert parent.pending("s1") == waiting == parent.pending("s1:r1")
            assert parent.pending("elsewhere") == []
            assert parent.state("s1") == "awaiting_tool"  # the parent's call runs the child
            assert child.state("s1:r1") == "awaiting_approval"  # the child waits for the answer
            on_child = AgentRunConfig(session_id=event.session_id)
            stray = parent.deliver(
                ExternalEvent("ask_user_response", {"tool_call_id": "q9", "answer": "eu"}), config=on_child
            )
            assert not stray
            assert "no waiting call tool_call_id='q9' in session 's1:r1'" in stray.refused["subagent:research"]
            invalid = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "mars"})
            assert parent.agent.emit_external_event(invalid, config=on_child) == []
            answer = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "eu"})
            assert parent.agent.emit_external_event(answer, config=on_child) == ["subagent:research"]
            assert parent.agent.emit_external_event(answer, config=on_child) == []  # answered once
    child_results = [e.payload["result"].content for e in of(events, "s1:r1") if e.name == "tool_completed"]
    assert child_results == ["eu"]
    assert events[-1].name == "run_completed" and events[-1].session_id == "s1"
    assert parent.pending() == []


async def test_tool_approval_and_plan_mode_inside_the_child_are_answered_through_the_parent(tmp_path: Any) -> None:
    child = await researcher(
        asks(call("p1", "enter_plan_mode", reason="risky")),
        asks(call("p2", "exit_plan_mode", plan="the plan")),
        asks(call("d1", "lookup", key="k")),
        AssistantMessage("planned and looked up"),
        tools=[lookup],
        extensions=[PlanModeExtension(root=tmp_path), ToolApprovalExtension({"lookup": "ask"})],
    )
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="plan")), AssistantMessage("ok")]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    asked: list[str] = []
    events: list[AgentEvent] = []
    answers = {
        "enter_plan_mode": lambda e: {"tool_call_id": e.payload["tool_call_id"], "approved": True},
        "exit_plan_mode": lambda e: {"tool_call_id": e.payload["tool_call_id"], "approved": True},
        "tool_approval": lambda e: {"tool_call_id": e.payload["tool_call_id"], "approved": True},
    }
    with trio.fail_after(LIMIT):
        async for event in parent.stream("go", config=AgentRunConfig("s1")):
            events.append(event)
            if event.name in answers:
                asked.append(event.name)
                response = ExternalEvent(event.payload["response_event"], answers[event.name](event))
                delivery = parent.deliver(response, config=AgentRunConfig(session_id=event.session_id))
                assert delivery.accepted == ("subagent:research",), delivery.reason
    assert asked == ["enter_plan_mode", "exit_plan_mode", "tool_approval"]
    names = [e.name for e in of(events, "s1:r1")]
    assert "plan_mode_entered" in names and "plan_mode_exited" in names
    done = [e for e in events if isinstance(e, SubagentCompletedEvent)]
    assert (done[0].outcome, done[0].result) == ("completed", "planned and looked up")
    tool_approvals = [
        (e.source, e.dest)
        for e in of(events, "s1:r1")
        if isinstance(e, TransitionEvent) and e.machine == "tool_approval"
    ]
    allowed = ("deciding", "allowed")  # the Plan Mode tools are allowed by the policy's default
    assert tool_approvals == [allowed, allowed, ("deciding", "asking"), ("asking", "approved")]


async def test_steering_for_the_child_session_goes_to_the_child() -> None:
    release = trio.Event()

    @tool
    async def wait_for_release() -> str:
        """Wait."""
        await release.wait()
        return "released"

    child_model = ScriptedModel([asks(call("w1", "wait_for_release")), AssistantMessage("steered answer")])
    child = await create_agent(child_model, tools=[wait_for_release])
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="t")), AssistantMessage("ok")]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    events: list[AgentEvent] = []
    with trio.fail_after(LIMIT):
        async for event in parent.stream("go", config=AgentRunConfig("s1")):
            events.append(event)
            if event.name == "tool_started" and event.session_id == "s1:r1":
                steer = ExternalEvent("steering_message", {"content": "focus on y"})
                assert parent.agent.emit_external_event(steer, config=AgentRunConfig("s1:r1")) == ["subagent:research"]
                release.set()
    applied = [e for e in of(events, "s1:r1") if e.name == "steering_applied"]
    assert [e.payload["message"].content for e in applied] == ["focus on y"]
    assert child_model.requests[-1].messages[-1] == UserMessage("focus on y")


# cancellation and failure ----------------------------------------------------


async def cancelled_run(client: AgentClient, session: str) -> list[AgentEvent]:
    """Start a run, cancel it once its child's tool started, and read its whole log."""
    handle = await client.start("go", config=AgentRunConfig(session))
    events: list[AgentEvent] = []
    with trio.fail_after(LIMIT):
        async for event in handle.events():
            events.append(event)
            if event.name == "tool_started" and event.session_id == f"{session}:r1":
                handle.cancel()
        await handle.wait()
    return events


async def test_cancelling_the_parent_cancels_the_child_and_settles_both_calls() -> None:
    child = await researcher(asks(call("h1", "hang")), tools=[hang])
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="t"))]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    events = await cancelled_run(parent, "s1")
    assert parent.transitions("s1")[-1].dest == "cancelled"
    assert child.transitions("s1:r1")[-1].dest == "cancelled"
    assert child.agent.running() == [] and parent.agent.running() == []
    child_history = child.agent.history.load("s1:r1")  # type: ignore[union-attr]
    assert child_history[-1] == ToolMessage("h1", "hang", "not completed: request cancelled", ToolStatus.CANCELLED)
    parent_history = parent.agent.history.load("s1")  # type: ignore[union-attr]
    assert parent_history[-1] == ToolMessage("r1", "research", "not completed: request cancelled", ToolStatus.CANCELLED)
    assert subagent_edges(events) == [("checking", "start", "running"), ("running", "cancel", "cancelled")]
    done = [e for e in events if isinstance(e, SubagentCompletedEvent)]
    assert [(d.outcome, d.result) for d in done] == [("cancelled", "")]
    child_names = [e.name for e in of(events, "s1:r1")]
    assert child_names[-3:] == ["tool_cancelled", "transition", "run_cancelled"]
    assert events.index(done[0]) > max(i for i, e in enumerate(events) if e.session_id == "s1:r1")
    assert [e.name for e in of(events, "s1")][-3:] == ["tool_cancelled", "transition", "run_cancelled"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_failing_child_is_the_parents_failed_result_and_the_parent_goes_on() -> None:
    child = await researcher()  # no steps: its first model call fails
    parent_model = ScriptedModel([asks(call("r1", "research", task="t")), AssistantMessage("recovered")])
    parent = await create_agent(parent_model, extensions=[agent_tool(child, name="research", description="Research.")])
    events = await collect(parent, "go")
    failed = [e for e in of(events, "s1") if e.name == "tool_failed"]
    assert len(failed) == 1
    result = failed[0].payload["result"]
    assert result.status is ToolStatus.FAILED
    assert result.content.startswith("research failed: ScriptExhausted: script has 0 steps")
    assert [e.name for e in of(events, "s1:r1")][-1] == "run_failed"
    done = [e for e in events if isinstance(e, SubagentCompletedEvent)]
    assert [(d.outcome, d.result) for d in done] == [("failed", result.content)]
    assert subagent_edges(events) == [("checking", "start", "running"), ("running", "fail", "failed")]
    assert events[-1].name == "run_completed" and events[-1].payload["result"].content == "recovered"
    assert parent_model.requests[1].messages[-1] == result
    assert child.transitions("s1:r1")[-1].dest == "failed"


# depth ---------------------------------------------------------------------


async def chain(levels: int, **options: Any) -> tuple[list[AgentClient], list[ScriptedModel]]:
    """Agents 0..levels-1, each but the last offering the next as ``deeper``; each calls it once, and ``depth_here``."""
    clients: list[AgentClient] = []
    models: list[ScriptedModel] = []
    below: AgentClient | None = None
    for level in reversed(range(levels)):
        calls = [call(f"h{level}", "depth_here")]
        extensions = []
        if below is not None:
            calls.insert(0, call(f"d{level}", "deeper", task=f"level {level + 1}"))
            extensions.append(agent_tool(below, name="deeper", description="Go deeper.", **options))
        model = ScriptedModel([asks(*calls), AssistantMessage(f"level {level} done")])
        below = await create_agent(model, extensions=extensions, tools=[depth_here])
        clients.insert(0, below)
        models.insert(0, model)
    return clients, models


async def test_depth_is_bounded_by_default_and_the_call_beyond_it_is_a_clear_failed_result() -> None:
    assert MAX_DEPTH == 3
    clients, models = await chain(5)
    events = await collect(clients[0], "go")
    starts = [e for e in events if isinstance(e, SubagentStartedEvent)]
    assert [(e.session_id, e.child_session_id, e.depth) for e in starts] == [
        ("s1", "s1:d0", 1),
        ("s1:d0", "s1:d0:d1", 2),
        ("s1:d0:d1", "s1:d0:d1:d2", 3),
    ]
    refused = [e for e in of(events, "s1:d0:d1:d2") if e.name == "tool_failed"]
    assert [e.payload["result"].content for e in refused] == [
        "refused: deeper would run at depth 4, and subagents nest at most 3 deep"
    ]
    assert ("checking", "start", "refused") in subagent_edges(events)
    assert models[4].requests == []  # the fifth agent never ran
    depths = {
        e.session_id: e.payload["result"].content
        for e in events
        if e.name == "tool_completed" and e.payload["call"].name == "depth_here"
    }
    assert depths == {"s1": "0", "s1:d0": "1", "s1:d0:d1": "2", "s1:d0:d1:d2": "3"}
    assert events[-1].session_id == "s1" and events[-1].name == "run_completed"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_max_depth_is_configurable() -> None:
    clients, models = await chain(3, max_depth=1)
    events = await collect(clients[0], "go")
    assert [e.child_session_id for e in events if isinstance(e, SubagentStartedEvent)] == ["s1:d0"]
    refused = [e.payload["result"].content for e in of(events, "s1:d0") if e.name == "tool_failed"]
    assert refused == ["refused: deeper would run at depth 2, and subagents nest at most 1 deep"]
    assert models[2].requests == []
    with pytest.raises(ValueError, match="max_depth"):
        agent_tool(clients[0], name="x", description="x", max_depth=0)


async def test_an_agent_that_is_its_own_subagent_stops_at_the_depth_bound() -> None:
    model = ScriptedModel(
        [asks(call(f"c{i}", "myself", task=f"again {i}")) for i in range(4)]
        + [AssistantMessage(f"answer {i}") for i in range(4)]
    )
    extension = agent_tool(await create_agent(ScriptedModel()), name="myself", description="Ask yourself.")
    client = await create_agent(model, extensions=[extension], history=InMemoryHistory())
    extension.agent = client.agent  # the agent's own tool
    events: list[AgentEvent] = []
    with trio.fail_after(LIMIT):
        async for event in client.stream("go", config=AgentRunConfig("s1")):
            events.append(event)
            if isinstance(event, SubagentStartedEvent):
                # deliveries and listings for children of the same agent do not loop
                assert not client.deliver(ExternalEvent("nothing", {}), config=AgentRunConfig(event.child_session_id))
                assert client.pending() == []
    assert [e.depth for e in events if isinstance(e, SubagentStartedEvent)] == [1, 2, 3]
    assert subagent_edges(events).count(("checking", "start", "refused")) == 1
    assert events[-1].name == "run_completed" and events[-1].payload["result"].content == "answer 3"
    trace = client.trace("s1")
    assert "c1_c1_c1_machine" in trace and "c1_c1_c1_c1_machine" not in trace


# trace ---------------------------------------------------------------------


async def test_trace_draws_each_child_as_a_nested_machine_linked_from_the_parents_call() -> None:
    clients, _ = await chain(3)
    await collect(clients[0], "go")
    trace = clients[0].trace("s1")
    assert trace == clients[0].agent.trace("s1")
    assert 'subgraph c1_machine["deeper d0 · session s1:d0"]' in trace
    assert 'subgraph c1_c1_machine["deeper d1 · session s1:d0:d1"]' in trace
    # The grandchild's subgraph is inside the child's: it opens before the child's closes.
    lines = trace.splitlines()
    child_open = lines.index('  subgraph c1_machine["deeper d0 · session s1:d0"]')
    grandchild_open = lines.index('    subgraph c1_c1_machine["deeper d1 · session s1:d0:d1"]')
    child_close = lines.index("  end", child_open)
    assert child_open < grandchild_open < child_close
    edges, lit = highlighted(trace)
    assert ("phase__awaiting_tool", "d0", "c1_machine") in edges
    assert ("c1_phase__awaiting_tool", "d1", "c1_c1_machine") in edges
    for prefix in ("", "c1_", "c1_c1_"):
        assert (f"{prefix}phase__concluding", "complete", f"{prefix}phase__completed") in lit
        assert f"{prefix}phase__completed" in classes(trace, "current")
    assert re.search(r"linkStyle \d+,\d+ stroke:#8250df", trace)
    # A session without children draws as before.
    assert "subgraph c1_machine" not in clients[1].trace("s1:d0:d1")


async def test_trace_labels_survive_hostile_call_ids() -> None:
    child = await researcher(AssistantMessage("ok"))
    parent = await create_agent(
        ScriptedModel([asks(call('r"1\n', "research", task="t")), AssistantMessage("ok")]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    await collect(parent, "go")
    trace = parent.trace("s1")
    session = child_session_id("s1", 'r"1\n')  # a call id that is not plain: the child's id ends in a digest
    assert session.startswith("s1:~")
    assert f'subgraph c1_machine["research r#quot;1  · session {session}"]' in trace
    assert '-.->|"r#quot;1 "| c1_machine' in trace


# the subagent machine ------------------------------------------------------


async def test_every_edge_of_the_subagent_machine_is_taken_by_real_calls() -> None:
    table = {(source, t.trigger, t.dest) for t in SUBAGENT.regions[0].transitions for source in t.source}
    seen: set[tuple[str, str, str]] = set()
    seen |= set(subagent_edges(await collect(await _parent(AssistantMessage("fine")), "go", "ok")))
    seen |= set(subagent_edges(await collect(await _parent(), "go", "fail")))
    clients, _ = await chain(3, max_depth=1)
    seen |= set(subagent_edges(await collect(clients[0], "go", "deep")))
    seen |= set(subagent_edges(await cancelled_run(await _parent(asks(call("h", "hang"))), "c")))
    assert seen <= table
    assert seen == table


async def _parent(*child_steps: AssistantMessage) -> AgentClient:
    child = await researcher(*child_steps, tools=[hang])
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="t")), AssistantMessage("after")]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    return parent


async def test_a_blank_task_is_a_failed_result_and_starts_no_child() -> None:
    child_model = ScriptedModel([AssistantMessage("never")])
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="  ")), AssistantMessage("ok")]),
        extensions=[agent_tool(await create_agent(child_model), name="research", description="Research.")],
    )
    events = await collect(parent, "go")
    failed = [e.payload["result"].content for e in events if e.name == "tool_failed"]
    assert failed == ["invalid arguments for research: task: must not be blank"]
    assert subagent_edges(events) == [] and child_model.requests == []


async def test_the_tool_offers_a_task_parameter_and_the_given_description() -> None:
    extension = SubAgentExtension(await create_agent(ScriptedModel()), name="research", description="Digs.")
    assert extension.name == "subagent:research"
    assert extension.tool.name == "research"
    assert extension.tool.description == "Digs."
    assert extension.tool.parameters["required"] == ["task"]
    assert extension.tool.parameters["properties"]["task"]["type"] == "string"
    with pytest.raises(ValueError, match="name"):
        SubAgentExtension(extension.agent, name="", description="x")


async def test_a_parent_and_its_child_are_freed_without_the_collector() -> None:
    kept: list[Any] = []

    class Keeper(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            kept.append(weakref.ref(context))

    child = await researcher(
        asks(call("k1", "lookup", key="x")), AssistantMessage("x"), tools=[lookup], extensions=[Keeper()]
    )
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="t")), AssistantMessage("ok")]),
        extensions=[agent_tool(child, name="research", description="Research."), Keeper()],
    )
    gc.collect()
    gc.disable()
    try:
        async with parent.stream("go", config=AgentRunConfig("s1")) as stream:
            names = [event.name async for event in stream]
        del stream
        assert names[-1] == "run_completed"
        assert len(kept) == 2 and [ref() for ref in kept] == [None, None]
    finally:
        gc.enable()


async def test_cancelling_the_parent_while_the_child_waits_for_an_answer_withdraws_the_question() -> None:
    child = await researcher(
        asks(call("q1", "ask_user", question="Which?", options=["a", "b"])), extensions=[AskUserExtension()]
    )
    parent = await create_agent(
        ScriptedModel([asks(call("r1", "research", task="t"))]),
        extensions=[agent_tool(child, name="research", description="Research.")],
    )
    handle = await parent.start("go", config=AgentRunConfig("s1"))
    with trio.fail_after(LIMIT):
        async for event in handle.events():
            if event.name == "ask_user":
                assert [p.session_id for p in parent.pending()] == ["s1:r1"]
                handle.cancel()
        await handle.wait()
    assert parent.pending() == [] and child.pending() == []
    assert child.transitions("s1:r1")[-1].dest == "cancelled"
    late = ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "a"})
    assert not parent.deliver(late, config=AgentRunConfig("s1:r1"))  # nobody waits any more

"""Every (state, trigger) pair of every machine, checked against its definition.

The expected outcome of each pair is computed here from the definition's own
edges: for every truth assignment of the guards involved, the first edge whose
conditions hold and whose ``unless`` guards fail is taken; with none, the
trigger is refused. A pair with no edge at all must raise IllegalTransition.
The machines under test are the generated ``transitions`` machines, driven
through BoundMachine with predicates that return the chosen assignment.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

import pytest
import trio
from support import asks, call

from machines.build import BoundMachine, GuardRefused, IllegalTransition
from machines.definition import MachineDefinition, Region, Transition
from machines.registry import all_definitions
from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ResponseRouter,
    ScriptedModel,
    ToolRejected,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent, TransitionEvent
from orchestrator.runtime.pending import PendingResponse, require_bool

DEFINITIONS = all_definitions()

Edge = tuple[str, str, str, str, str]  # machine, region, source, trigger, dest


def table(definition: MachineDefinition) -> set[Edge]:
    """Every edge of a definition, one entry per source state."""
    return {
        (definition.name, region.name, source, t.trigger, t.dest)
        for region in definition.regions
        for t in region.transitions
        for source in t.source
    }


ALL_EDGES: set[Edge] = set().union(*(table(d) for d in DEFINITIONS.values()))


def edges_from(region: Region, state: str, trigger: str) -> list[Transition]:
    return [t for t in region.transitions if t.trigger == trigger and state in t.source]


def first_open(edges: list[Transition], truth: Mapping[str, bool]) -> Transition | None:
    """The edge the definition says is taken under ``truth``, or None when all are refused."""
    for edge in edges:
        if all(truth[g] for g in edge.conditions) and not any(truth[g] for g in edge.unless):
            return edge
    return None


def assignments(edges: list[Transition]) -> Iterator[dict[str, bool]]:
    names = sorted({g for e in edges for g in (*e.conditions, *e.unless)})
    for values in itertools.product((True, False), repeat=len(names)):
        yield dict(zip(names, values, strict=True))


def pairs() -> Iterator[Any]:
    for definition in DEFINITIONS.values():
        for region in definition.regions:
            for state in region.state_names:
                for trigger in region.triggers:
                    yield pytest.param(
                        definition, region, state, trigger, id=f"{definition.name}.{region.name}:{state}--{trigger}"
                    )


class Predicates:
    """A guard table whose answers the test sets; unknown guards are a failure."""

    def __init__(self, definition: MachineDefinition) -> None:
        self.truth: dict[str, bool] = {}
        self.asked: list[str] = []
        self.table = {name: self._predicate(name) for name in definition.guard_names}

    def _predicate(self, name: str) -> Any:
        def predicate(event: Any) -> bool:
            self.asked.append(name)
            return self.truth[name]

        return predicate


@pytest.mark.parametrize(("definition", "region", "state", "trigger"), list(pairs()))
def test_pair(definition: MachineDefinition, region: Region, state: str, trigger: str) -> None:
    edges = edges_from(region, state, trigger)
    guards = Predicates(definition)
    others = {r.name: r.initial for r in definition.regions if r is not region}
    if not edges:
        machine = BoundMachine(definition, guards.table, initial={region.name: state})
        with pytest.raises(IllegalTransition) as refused:
            machine.fire(trigger)
        allowed = tuple(t for t in region.triggers if edges_from(region, state, t))
        assert str(refused.value) == (
            f"{definition.name}: trigger {trigger!r} is not allowed from {region.name} state {state!r}"
            f" (allowed there: {', '.join(allowed) or 'none'})"
        )
        assert (refused.value.region, refused.value.state, refused.value.trigger) == (region.name, state, trigger)
        assert refused.value.allowed == allowed
        with pytest.raises(IllegalTransition):
            machine.try_fire(trigger)
        assert not machine.may(trigger)
        assert machine.states == {**others, region.name: state}
        assert machine.history == []
        machine.unbind()
        return

    reached: set[int] = set()
    for truth in assignments(edges):
        guards.truth = truth
        machine = BoundMachine(definition, guards.table, initial={region.name: state})
        expected = first_open(edges, truth)
        assert machine.may(trigger) is (expected is not None)
        if expected is None:
            assert machine.try_fire(trigger) is None
            with pytest.raises(GuardRefused) as refused:
                machine.fire(trigger)
            guards_of_edges = tuple(g for e in edges for g in e.guards)
            assert str(refused.value) == (
                f"{definition.name}: trigger {trigger!r} refused in {region.name} state {state!r}; "
                f"guards {', '.join(guards_of_edges) or '(none)'} did not all hold"
            )
            assert refused.value.guards == guards_of_edges
            assert machine.states == {**others, region.name: state}
            assert machine.history == []
        else:
            reached.add(edges.index(expected))
            step, taken = machine.fire(trigger)
            assert taken == expected
            assert (step.machine, step.region, step.source, step.trigger, step.dest) == (
                definition.name,
                region.name,
                state,
                trigger,
                expected.dest,
            )
            assert machine.states == {**others, region.name: expected.dest}
            assert machine.history == [step]
        machine.unbind()
    assert reached == set(range(len(edges))), f"edges of {trigger!r} from {state!r} that no guard value reaches"


def test_every_machine_is_covered_and_unknown_triggers_are_illegal() -> None:
    expected = {"request", "approval", "plan_mode", "steering_inbox", "tool_approval", "run_lease", "subagent", "agui_run"}
    assert expected | {"mcp_connection"} <= set(DEFINITIONS)
    for definition in DEFINITIONS.values():
        machine = BoundMachine(definition, Predicates(definition).table)
        before = machine.states
        for attempt in (machine.fire, machine.try_fire, machine.may):
            with pytest.raises(IllegalTransition) as refused:
                attempt("no_such_trigger")
            assert str(refused.value) == f"{definition.name}: no region of the machine has a trigger 'no_such_trigger'"
        assert machine.states == before and machine.history == []
        machine.unbind()


def test_final_states_have_no_way_out() -> None:
    for definition in DEFINITIONS.values():
        for region in definition.regions:
            for state in region.final_states:
                assert not [t for t in region.transitions if state in t.source], (definition.name, state)


def test_a_missing_guard_predicate_is_refused_up_front() -> None:
    definition = DEFINITIONS["request"]
    with pytest.raises(ValueError, match="within_budget"):
        BoundMachine(definition, {})


# real requests -----------------------------------------------------------------


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


@tool
async def hang() -> str:
    """Never returns."""
    await trio.sleep_forever()
    return ""


class Gate(AgentExtension):
    """Pauses ``echo`` calls until an ``approval`` response arrives; rejects refused ones."""

    def __init__(self) -> None:
        self.router = ResponseRouter()
        self.waits: list[PendingResponse] = []

    async def before_tool(self, context, call):  # type: ignore[no-untyped-def]
        if call.name != "echo":
            return
        answer = await self.router.wait(context, call.id, response_event="approval", validate=require_bool("approved"))
        if not answer["approved"]:
            raise ToolRejected("declined")

    async def on_event(self, context, event):  # type: ignore[no-untyped-def]
        if isinstance(event, TransitionEvent) and event.trigger == "await_approval":
            self.waits += [w for w in self.router.waiting(context.session_id) if w not in self.waits]

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        return self.router.accept(config, event)


def observed(events: list[AgentEvent]) -> list[Edge]:
    return [(e.machine, e.region, e.source, e.trigger, e.dest) for e in events if isinstance(e, TransitionEvent)]


def as_edges(steps: Any) -> list[Edge]:
    return [(s.machine, s.region, s.source, s.trigger, s.dest) for s in steps]


async def test_every_transition_of_real_requests_is_in_the_tables() -> None:
    gate = Gate()
    model = ScriptedModel(
        [
            asks(call("a", "echo", text="one"), call("b", "echo", text="two")),
            AssistantMessage("both done"),
            asks(call("c", "hang")),
            asks(call("d", "echo", text="late")),
        ]
    )
    client = await create_agent(model, tools=[echo, hang], extensions=[gate])
    seen: list[Edge] = []

    # tool calls, one approved and one rejected, with a stray and a duplicate response
    events: list[AgentEvent] = []
    async for event in client.stream("go", config=AgentRunConfig("ok")):
        events.append(event)
        if isinstance(event, TransitionEvent) and event.trigger == "await_approval":
            stray = ExternalEvent("approval", {"tool_call_id": "nobody", "approved": True})
            assert client.agent.emit_external_event(stray, config=AgentRunConfig("ok")) == []
            for wait in gate.router.waiting("ok"):
                answer = ExternalEvent("approval", {"tool_call_id": wait.key, "approved": wait.key == "a"})
                assert client.agent.emit_external_event(answer, config=AgentRunConfig("ok")) == ["Gate"]
                assert client.agent.emit_external_event(answer, config=AgentRunConfig("ok")) == []
    assert events[-1].name == "run_completed"
    assert observed(events) == as_edges(client.transitions("ok"))
    seen += observed(events)

    # cancellation while a tool runs
    with trio.move_on_after(5) as scope:
        async for event in client.stream("again", config=AgentRunConfig("cancel")):
            if event.name == "tool_started":
                scope.cancel()
    assert scope.cancelled_caught
    assert client.transitions("cancel")[-1].dest == "cancelled"
    seen += as_edges(client.transitions("cancel"))

    # failure: the request waits for an approval, then the script runs out
    async def fail() -> None:
        async for event in client.stream("late", config=AgentRunConfig("fail")):
            if isinstance(event, TransitionEvent) and event.trigger == "await_approval":
                answer = ExternalEvent("approval", {"tool_call_id": "d", "approved": True})
                client.agent.emit_external_event(answer, config=AgentRunConfig("fail"))

    with pytest.raises(Exception, match="script has 4 steps"):
        await fail()
    assert client.transitions("fail")[-1].dest == "failed"
    seen += as_edges(client.transitions("fail"))

    for wait in gate.waits:
        seen += as_edges(wait.machine.history)
    assert [w.state for w in gate.waits] == ["answered", "answered", "answered"]
    triggers = {edge[3] for edge in seen}
    assert {"respond", "await_approval", "resume", "admit_tool", "answer", "cancel", "fail", "complete"} <= triggers
    assert {edge[0] for edge in seen} == {"request", "approval"}
    unknown = [edge for edge in seen if edge not in ALL_EDGES]
    assert unknown == [], f"transitions taken that the definitions do not have: {unknown}"
    assert gate.router.waiting() == []


async def test_plan_mode_requests_take_only_table_transitions(tmp_path: Any) -> None:
    from orchestrator.extensions.plan_mode import PlanModeExtension

    plan_mode = PlanModeExtension(root=tmp_path)
    model = ScriptedModel(
        [
            asks(call("e1", "enter_plan_mode", reason="risky")),
            asks(call("l1", "list_files", path="."), call("x1", "echo", text="blocked")),
            asks(call("p1", "exit_plan_mode", plan="first draft")),
            asks(call("p2", "exit_plan_mode", plan="second draft")),
            AssistantMessage("planned"),
        ]
    )
    client = await create_agent(model, tools=[echo], extensions=[plan_mode])
    answers = {"e1": True, "p1": False, "p2": True}
    events: list[AgentEvent] = []
    async for event in client.stream("plan it", config=AgentRunConfig("plan")):
        events.append(event)
        if event.name in ("enter_plan_mode", "exit_plan_mode"):
            key = event.payload["tool_call_id"]
            response = ExternalEvent(event.payload["response_event"], {"tool_call_id": key, "approved": answers[key]})
            assert client.agent.emit_external_event(response, config=AgentRunConfig("plan")) == ["PlanModeExtension"]
    seen = observed(events)
    assert [e[3] for e in seen if e[0] == "plan_mode"] == [
        "propose_entry",
        "approve",
        "propose_exit",
        "reject",
        "propose_exit",
        "approve",
    ]
    assert [e[3] for e in seen if e[1] == "mode" and e[3] != "admit_tool"] == ["enter_plan", "exit_plan"]
    unknown = [edge for edge in seen if edge not in ALL_EDGES]
    assert unknown == [], f"transitions taken that the definitions do not have: {unknown}"
    assert not plan_mode.is_plan_mode("plan")


async def test_structured_output_requests_take_every_edge_of_validating_output() -> None:
    import dataclasses
    from functools import partial

    from orchestrator.output import OutputType

    @dataclasses.dataclass
    class Answer:
        value: int

    class Stall(AgentExtension):
        async def on_event(self, context, event):  # type: ignore[no-untyped-def]
            if isinstance(event, TransitionEvent) and event.dest == "validating_output" and context.session_id == "c":
                await trio.sleep_forever()

    model = ScriptedModel([AssistantMessage("nope"), AssistantMessage('{"value": 1}'), AssistantMessage("nope")])
    model.repeat_last = True
    client = await create_agent(model, extensions=[Stall()], output_type=OutputType(Answer, retries=1))
    seen: list[Edge] = []
    assert (await client.run("retried, then accepted", config=AgentRunConfig("ok"))).output == Answer(1)  # type: ignore[attr-defined]
    seen += as_edges(client.transitions("ok"))
    with pytest.raises(Exception, match="did not match the output type after 2 attempt"):
        await client.run("never fits", config=AgentRunConfig("fail"))
    seen += as_edges(client.transitions("fail"))
    with trio.move_on_after(5) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(client.run, "cancelled", config=AgentRunConfig("c")))
            while client.state("c") != "validating_output":
                await trio.sleep(0.01)
            scope.cancel()
    seen += as_edges(client.transitions("c"))
    assert [edge for edge in seen if edge not in ALL_EDGES] == []
    # Into checking_output (an answer that fits, with output guardrails): the guardrails' test below takes it.
    validating = {e for e in ALL_EDGES if "validating_output" in (e[2], e[4]) and e[4] != "checking_output"}
    assert validating - set(seen) == set(), "edges of validating_output that no real request took"


async def test_guarded_requests_take_every_edge_of_the_guardrail_states() -> None:
    from orchestrator import GuardrailResult, GuardrailsExtension, OutputType, UsageLimits
    from orchestrator import input_guardrail as on_input
    from orchestrator import output_guardrail as on_output

    @on_input
    async def screen(context, message):  # type: ignore[no-untyped-def]
        if message.content == "raise":
            raise RuntimeError("screen broke")
        if message.content == "stall":
            await trio.sleep_forever()
        return GuardrailResult(tripwire="forbidden" in message.content, reason="forbidden input")

    @on_output
    async def review(context, answer):  # type: ignore[no-untyped-def]
        if answer.content == "boom":
            raise RuntimeError("review broke")
        if answer.content == "wait":
            await trio.sleep_forever()
        return GuardrailResult(tripwire="rude" in answer.content, reason="rude answer")

    def answers_back(request):  # type: ignore[no-untyped-def]
        return AssistantMessage(request.messages[-1].content.removeprefix("say "))

    guardrails = GuardrailsExtension([screen, review])
    model = ScriptedModel([answers_back], repeat_last=True)
    client = await create_agent(model, extensions=[guardrails])
    seen: list[Edge] = []

    async def attempt(text: str, session_id: str, agent: Any = client, deadline: float | None = None) -> None:
        with contextlib.suppress(Exception):
            await agent.run(text, config=AgentRunConfig(session_id, deadline=deadline))
        seen.extend(as_edges(agent.transitions(session_id)))

    async def cancelled_in(text: str, session_id: str, state: str) -> None:
        with trio.move_on_after(5) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(client.run, text, config=AgentRunConfig(session_id)))
                while client.state(session_id) != state:
                    await trio.sleep(0.01)
                scope.cancel()
        seen.extend(as_edges(client.transitions(session_id)))

    await attempt("say fine", "passes")
    await attempt("forbidden", "input-trips")
    await attempt("say rude", "output-trips")
    await attempt("raise", "input-raises")
    await attempt("say boom", "output-raises")
    await cancelled_in("stall", "input-cancelled", "checking_input")
    await cancelled_in("say wait", "output-cancelled", "checking_output")
    for text, session_id in (("stall", "input-deadline"), ("say wait", "output-deadline")):
        with trio.fail_after(5):
            await attempt(text, session_id, client, deadline=0.05)
    typed = await create_agent(model, extensions=[guardrails], output_type=OutputType(int))
    await attempt("say 7", "typed", typed)
    for on_exhausted, session_id in (("wrap_up", "wraps-up"), ("fail", "limited")):
        limited = await create_agent(
            model, extensions=[guardrails], usage_limits=UsageLimits(requests=0, on_exhausted=on_exhausted)
        )
        await attempt("say brief", session_id, limited)

    assert [edge for edge in seen if edge not in ALL_EDGES] == []
    guarded = {edge for edge in ALL_EDGES if {"checking_input", "checking_output"} & {edge[2], edge[4]}}
    assert guarded - set(seen) == set(), "edges of the guardrail states that no real request took"

"""Model-checked invariants: random interleavings of live requests on ScriptedModel.

A hypothesis RuleBasedStateMachine drives one agent (Plan Mode, an approval
gate, steering) whose trio loop runs in a worker thread. Each rule does one
thing from outside, the way an application would (answer the model, approve,
reject, send a stray or duplicate response, steer, cancel), then waits until
every task of the loop is blocked, so the checks after each rule see a
quiescent system. Rules are the only source of progress: the model answers
only when a rule says what it answers.

The same rules also run as fixed scenarios (``play``), so every invariant is
exercised on every run whatever hypothesis draws, and each invariant is shown to
fail when the defect it guards against is injected.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from machines.build import BoundMachine, generated
from machines.definition import MachineDefinition
from machines.registry import all_definitions
from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ModelError,
    ResponseRouter,
    ScriptedModel,
    ToolCall,
    ToolMessage,
    ToolRejected,
    UserMessage,
    create_agent,
    edges,
    tool,
)
from orchestrator import runtime as runtime_module
from orchestrator.events import SteeringAcceptedEvent, SteeringAppliedEvent, TransitionEvent
from orchestrator.extensions import steering as steering_module
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.steering import STEERING_EVENT, SteeringExtension
from orchestrator.messages import ToolStatus
from orchestrator.runtime.pending import PendingResponse, require_bool

SESSION = "s"
CONFIG = AgentRunConfig(SESSION)
DEFINITIONS = all_definitions()
FINAL_PHASES = DEFINITIONS["request"].main.final_states
TABLE = {
    (d.name, r.name, source, t.trigger, t.dest)
    for d in DEFINITIONS.values()
    for r in d.regions
    for t in r.transitions
    for source in t.source
}
APPROVAL_EVENTS = ("approval", "enter_plan_mode_response", "exit_plan_mode_response")

Edge = tuple[str, str, str, str, str]  # machine, region, source, trigger, dest


def walk_problems(what: str, steps: Sequence[Edge], definition: MachineDefinition) -> list[str]:
    """Why ``steps`` is not a walk through ``definition`` from its initial states (empty when it is)."""
    at = {region.name: region.initial for region in definition.regions}
    problems: list[str] = []
    for index, step in enumerate(steps):
        machine, region, source, _trigger, dest = step
        if step not in TABLE:
            problems.append(f"{what}: step {index} {step} is not in the {definition.name} table")
        if machine != definition.name or region not in at:
            problems.append(f"{what}: step {index} {step} belongs to no region of {definition.name}")
            continue
        if source != at[region]:
            problems.append(f"{what}: step {index} {step} leaves {source!r} but {region} was in {at[region]!r}")
        at[region] = dest
    return problems


def bound_models() -> dict[str, int]:
    """How many models are bound to each generated machine of every definition."""
    return {
        f"{name}.{region}": len(machine.models)
        for name, definition in DEFINITIONS.items()
        for region, machine in generated(definition).items()
    }


# the world -----------------------------------------------------------------------


class LoopThread:
    """A trio loop in a worker thread; ``call`` runs a coroutine there and waits for quiescence."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="trio loop", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as failure:  # reported by close()
            self._failure = failure
            self._ready.set()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def call(self, fn: Callable[[], Awaitable[Any]], quiet: Callable[[], bool] = lambda: True) -> Any:
        """Run ``fn`` in the loop, then wait until every task is blocked and ``quiet()`` holds.

        Tool handlers may run in worker threads, which wake their task later; so
        blocked tasks alone are not enough, and ``quiet`` says what the world waits
        for (an answer of the model or of the user, or nothing). After 5 s the
        call returns anyway and the checks report what is stuck.
        """

        async def settled() -> Any:
            result = await fn()
            with trio.move_on_after(5):
                await trio.testing.wait_all_tasks_blocked()
                while not quiet():
                    await trio.sleep(0.001)
                    await trio.testing.wait_all_tasks_blocked()
            return result

        return trio.from_thread.run(settled, trio_token=self.token)

    def close(self) -> None:
        if self._failure is None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
        self._thread.join(10)
        assert not self._thread.is_alive(), "the trio loop did not stop"
        if self._failure is not None:
            raise self._failure


@attrs.frozen
class Execution:
    """A tool handler that actually ran, and the mode it ran in."""

    call_id: str
    name: str
    request_plan_active: bool
    session_plan_mode: bool


class Observer(AgentExtension):
    """Innermost tool wrapper and event sink: what ran, in which mode, and every transition."""

    priority = 1000

    def __init__(self, plan_mode: PlanModeExtension) -> None:
        self.plan_mode = plan_mode
        self.executions: list[Execution] = []
        self.in_flight = 0
        self.transitions: list[Edge] = []
        self.requests: list[str] = []
        self.violations: list[str] = []
        # Per request: the seq of every streamed event, and (seq, name, text) of each steering event.
        self.numbered: dict[str, list[int]] = {}
        self.steering_events: dict[str, list[tuple[int, str, str]]] = {}

    async def on_tool_call(self, context, call, call_next):  # type: ignore[no-untyped-def]
        self.executions.append(
            Execution(call.id, call.name, context.plan_mode_active, self.plan_mode.is_plan_mode(context.session_id))
        )
        self.in_flight += 1
        try:
            return await call_next(call)
        finally:
            self.in_flight -= 1

    async def on_event(self, context, event):  # type: ignore[no-untyped-def]
        if event.seq:
            self.numbered.setdefault(context.request_id, []).append(event.seq)
        if isinstance(event, (SteeringAcceptedEvent, SteeringAppliedEvent)):
            noted = (event.seq, event.name, event.message.text)
            self.steering_events.setdefault(context.request_id, []).append(noted)
        if not isinstance(event, TransitionEvent):
            return
        self.transitions.append((event.machine, event.region, event.source, event.trigger, event.dest))
        self.requests.append(context.request_id)
        if event.trigger == "enter_plan" and not self.plan_mode.is_plan_mode(context.session_id):
            self.violations.append("the request entered plan_active without an approved Plan Mode")


class Gate(AgentExtension):
    """``gated`` calls wait for an ``approval`` response; a refused one never runs."""

    def __init__(self) -> None:
        self.router = ResponseRouter()

    async def before_tool(self, context, call):  # type: ignore[no-untyped-def]
        if call.name != "gated":
            return
        answer = await self.router.wait(context, call.id, response_event="approval", validate=require_bool("approved"))
        if not answer["approved"]:
            raise ToolRejected("declined")

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        return self.router.accept(config, event)


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


@tool
def gated() -> str:
    """Runs only once approved."""
    return "gated ran"


@tool
def deploy(target: str) -> str:
    """Outside the Plan Mode capability set."""
    return f"deployed {target}"


CALLS: dict[str, dict[str, Any]] = {
    "echo": {"text": "x"},
    "gated": {},
    "deploy": {"target": "prod"},
    "enter_plan_mode": {"reason": "risky"},
    "exit_plan_mode": {"plan": "the plan"},
    "list_files": {"path": "."},
    "missing": {},
}


TOOL_MENU = sorted([*CALLS, "gated", "enter_plan_mode", "exit_plan_mode", "list_files"])
MODEL_FAILS, MODEL_ANSWERS, MODEL_CALLS = 0, 1, 11
"""``model_step`` actions: 0 a provider failure, 1-2 a final answer, 3-11 tool calls."""


class World:
    """One agent and the requests of one session, as seen from the application."""

    def __init__(self) -> None:
        self.loop = LoopThread()
        self.plan_mode = PlanModeExtension(root=Path(__file__).parent)
        self.gate = Gate()
        self.observer = Observer(self.plan_mode)
        self.steering = SteeringExtension()
        self.steered: dict[str, int] = {}
        self.outcomes: dict[int, str] = {}
        self.inbox_machines: list[Any] = []
        self.ids = itertools.count(1)
        self.model_waiting = False
        self.running = False
        self.scope: trio.CancelScope | None = None
        self.errors: list[BaseException] = []
        self.waits: list[PendingResponse] = []
        self.approved: set[str] = set()
        self.rejected: set[str] = set()
        self.answered: list[ExternalEvent] = []
        self.refused: list[str] = []
        self.plan_approvals = 0
        self.requests = 0
        self.baseline = bound_models()
        self.loop.call(self._setup)

    async def _setup(self) -> None:
        self.to_model, self.from_rules = trio.open_memory_channel[AssistantMessage | BaseException](100)
        model = ScriptedModel([self._model_step], repeat_last=True)
        self.client = await create_agent(
            model,
            tools=[echo, gated, deploy],
            extensions=[self.plan_mode, self.gate, self.steering, self.observer],
            max_iterations=100,
        )

    async def _model_step(self, request: Any) -> AssistantMessage:
        self.model_waiting = True
        try:
            item = await self.from_rules.receive()
        finally:
            self.model_waiting = False
        if isinstance(item, BaseException):
            raise item
        return item

    @property
    def extensions(self) -> list[AgentExtension]:
        return list(self.client.agent.extensions)

    def history(self) -> list[Any]:
        store = self.client.agent.history
        assert store is not None
        return list(store.load(SESSION))

    def pending(self) -> list[PendingResponse]:
        return sorted(self.gate.router.waiting(SESSION) + self.plan_mode.router.waiting(SESSION), key=lambda w: w.key)

    def quiet(self) -> bool:
        """Nothing runs by itself: no handler is busy and the request (if any) waits for an answer."""
        if self.observer.in_flight:
            return False
        return not self.running or self.model_waiting or bool(self.pending())

    def _call(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        return self.loop.call(fn, self.quiet)

    def _collect_waits(self) -> None:
        """Keep every approval wait and steering inbox seen, to check their machines' histories."""
        self.waits += [w for w in self.pending() if all(w is not seen for seen in self.waits)]
        for inbox in list(self.steering._inboxes.values()):
            if all(inbox.machine is not seen for seen in self.inbox_machines):
                self.inbox_machines.append(inbox.machine)

    # actions --------------------------------------------------------------------

    def start(self, text: str) -> None:
        self.requests += 1
        number = self.requests

        async def consume() -> None:
            with trio.CancelScope() as scope:
                self.scope = scope
                try:
                    async for _event in self.client.stream(text, config=CONFIG):
                        pass
                except Exception as error:
                    self.errors.append(error)
            phases = [s.dest for s in self.client.transitions(SESSION) if s.region == "phase"]
            self.outcomes[number] = phases[-1]
            self.running = False

        async def begin() -> None:
            self.running = True
            self.loop.nursery.start_soon(consume)

        self._call(begin)
        self._collect_waits()

    def model(self, item: AssistantMessage | BaseException) -> None:
        async def send() -> None:
            self.to_model.send_nowait(item)

        self._call(send)
        self._collect_waits()

    def respond(self, name: str, payload: dict[str, Any], config: AgentRunConfig = CONFIG) -> list[str]:
        event = ExternalEvent(name, payload)
        accepted: list[str] = self.client.agent.emit_external_event(event, config=config)
        self.settle()
        return accepted

    def withdrawn(self) -> list[PendingResponse]:
        """Waits that ended without an answer (their request ended)."""
        return [w for w in self.waits if w.state == "withdrawn"]

    def settle(self) -> None:
        async def nothing() -> None:
            await trio.lowlevel.checkpoint()

        self._call(nothing)
        self._collect_waits()

    def held_steering(self, content: str) -> int:
        """How many copies of a steering text wait in an inbox or in the runtime, not yet appended."""
        queued = sum(m.text == content for inbox in self.steering._inboxes.values() for m in inbox.messages)
        run = self.client.agent._live.get(SESSION)
        taken = run is not None and run.steering is not None and run.steering.text == content
        return queued + int(taken)

    def waiting_steering(self) -> int:
        """Accepted steering messages of the running request not appended yet."""
        return sum(self.held_steering(content) for content, number in self.steered.items() if number == self.requests)

    def cancel(self) -> None:
        async def cancel() -> None:
            assert self.scope is not None
            self.scope.cancel()

        self._call(cancel)

    def close(self) -> None:
        self.loop.close()

    def call(self, name: str) -> ToolCall:
        return ToolCall(f"t{next(self.ids)}", name, dict(CALLS[name]))


# the state machine ------------------------------------------------------------------


class Requests(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World()

    # rules ---------------------------------------------------------------------

    @precondition(lambda self: not self.world.running)
    @rule(text=st.sampled_from(["go", "plan first"]))
    def start_request(self, text: str) -> None:
        self.world.start(text)

    @precondition(lambda self: self.world.model_waiting)
    @rule(
        action=st.integers(MODEL_FAILS, MODEL_CALLS), names=st.lists(st.sampled_from(TOOL_MENU), min_size=1, max_size=3)
    )
    def model_step(self, action: int, names: list[str]) -> None:
        """Mostly tool calls; sometimes a final answer; rarely a provider failure."""
        if action == MODEL_FAILS:
            self.world.model(ModelError("the provider broke"))
        elif action <= 2:
            self.world.model(AssistantMessage("done"))
        else:
            self.world.model(AssistantMessage("working", tuple(self.world.call(n) for n in names)))

    @precondition(lambda self: bool(self.world.pending()))
    @rule(pick=st.integers(0, 3), approved=st.booleans())
    def answer_wait(self, pick: int, approved: bool) -> None:
        waits = self.world.pending()
        wait = waits[pick % len(waits)]
        payload = {"tool_call_id": wait.key, "approved": approved}
        owner = "Gate" if wait.response_event == "approval" else "PlanModeExtension"
        accepted = self.world.respond(wait.response_event, payload)
        assert accepted == [owner], f"a valid answer to {wait.key} was not taken exactly once: {accepted}"
        (self.world.approved if approved else self.world.rejected).add(wait.key)
        self.world.answered.append(ExternalEvent(wait.response_event, payload))
        if approved and wait.response_event != "approval":
            self.world.plan_approvals += 1

    @precondition(lambda self: self.world.running and self.world.waiting_steering() < 2)
    @rule()
    def steer(self) -> None:
        """Steering is taken while a request runs (refusal while idle is ``application_noise``)."""
        world = self.world
        content = f"steer {next(world.ids)}"
        accepted = world.respond(STEERING_EVENT, {"content": content})
        assert accepted == ["SteeringExtension"], f"steering to a running request was refused: {accepted}"
        world.steered[content] = world.requests

    @rule(
        kind=st.sampled_from(
            ["duplicate", "late", "misrouted", "malformed", "stray", "cancel", "blank_steer", "idle_steer", "idle"]
        ),
        pick=st.integers(0, 3),
    )
    def application_noise(self, kind: str, pick: int) -> None:
        """What else the application may do: answers nobody asked for (stray, for the wrong event or
        session, after the request ended), repeats, garbage, steering nothing runs for, waiting, cancelling."""
        world = self.world
        waits = world.pending()
        withdrawn = world.withdrawn()
        if kind == "duplicate" and world.answered:
            event = world.answered[pick % len(world.answered)]
            assert world.respond(event.name, dict(event.payload)) == [], f"{event} was taken twice"
        elif kind == "malformed" and waits:
            wait = waits[pick % len(waits)]
            assert world.respond(wait.response_event, {"tool_call_id": wait.key, "approved": "yes"}) == []
            assert wait in world.pending(), "a malformed response ended the wait"
        elif kind == "misrouted" and waits:
            wait = waits[pick % len(waits)]
            payload = {"tool_call_id": wait.key, "approved": True}
            wrong = [name for name in APPROVAL_EVENTS if name != wait.response_event][pick % 2]
            assert world.respond(wrong, payload) == [], f"{wrong} answered a wait for {wait.response_event}"
            assert world.respond(wait.response_event, payload, AgentRunConfig("another")) == [], (
                "another session's response was taken"
            )
            assert wait in world.pending(), "a misrouted response ended the wait"
            world.refused.append(wait.key)
        elif kind == "late" and withdrawn:
            wait = withdrawn[pick % len(withdrawn)]
            payload = {"tool_call_id": wait.key, "approved": True}
            assert world.respond(wait.response_event, payload) == [], f"a late answer to {wait.key} was taken"
            assert wait.state == "withdrawn"
            world.refused.append(wait.key)
        elif kind == "stray":
            name = APPROVAL_EVENTS[pick % len(APPROVAL_EVENTS)]
            payload = {"tool_call_id": "nobody-asked", "approved": True}
            assert world.respond(name, payload) == [], "a response nobody waits for was taken"
        elif kind == "blank_steer":
            assert world.respond(STEERING_EVENT, {"content": "  "}) == [], "blank steering was taken"
        elif kind == "idle_steer" and not world.running:
            assert world.respond(STEERING_EVENT, {"content": "nobody runs"}) == [], "steering taken while idle"
        elif kind == "cancel" and world.running:
            world.cancel()
        else:
            world.settle()

    # invariants ----------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        self.check()

    def check(self) -> None:
        """Every invariant, in turn (hypothesis runs them after every rule; ``play`` too)."""
        self.transitions_walk_the_tables()
        self.every_tool_call_has_one_result()
        self.plan_mode_only_runs_its_capabilities()
        self.no_approval_is_bypassed()
        self.steering_is_answered_once_and_never_lost()
        self.a_running_request_waits_for_someone()
        self.an_ended_request_leaves_nothing_behind()
        self.streamed_events_are_numbered_without_gaps()

    def streamed_events_are_numbered_without_gaps(self) -> None:
        """Each request numbers what it streams 1, 2, 3 ...; steering is accepted before it is applied."""
        observer = self.world.observer
        for request_id, seqs in observer.numbered.items():
            assert sorted(seqs) == list(range(1, len(seqs) + 1)), f"request {request_id} numbered its events {seqs}"
        for request_id, noted in observer.steering_events.items():
            accepted: set[str] = set()
            for _, name, text in sorted(noted):
                if name == "steering_accepted":
                    accepted.add(text)
                else:
                    assert text in accepted, f"steering {text!r} of request {request_id} applied before accepted"

    def transitions_walk_the_tables(self) -> None:
        """Each observed transition is in a table and starts where the previous one of its machine ended."""
        world = self.world
        observed = world.observer.transitions
        assert not set(observed) - TABLE, f"transitions outside the definitions: {sorted(set(observed) - TABLE)}"
        problems: list[str] = []
        per_request: dict[str, list[Edge]] = {}
        for request_id, step in zip(world.observer.requests, observed, strict=True):
            if step[0] == "request":
                per_request.setdefault(request_id, []).append(step)
        for request_id, steps in per_request.items():
            problems += walk_problems(f"request {request_id}", steps, DEFINITIONS["request"])
        latest = [(s.machine, s.region, s.source, s.trigger, s.dest) for s in world.client.transitions(SESSION)]
        if latest:
            announced = list(per_request.values())[-1]
            assert announced == latest, f"announced transitions {announced} differ from the machine's {latest}"
        plan = [step for step in observed if step[0] == "plan_mode"]
        problems += walk_problems("the session's plan mode", plan, DEFINITIONS["plan_mode"])
        for wait in world.waits:
            history = [(s.machine, s.region, s.source, s.trigger, s.dest) for s in wait.machine.history]
            problems += walk_problems(f"approval {wait.key}", history, DEFINITIONS["approval"])
        for inbox in world.inbox_machines:
            history = [(s.machine, s.region, s.source, s.trigger, s.dest) for s in inbox.history]
            problems += walk_problems("a steering inbox", history, DEFINITIONS["steering_inbox"])
        assert not problems, "\n".join(problems)
        assert not world.observer.violations, world.observer.violations

    def every_tool_call_has_one_result(self) -> None:
        world = self.world
        history = world.history()
        assistants = [i for i, m in enumerate(history) if isinstance(m, AssistantMessage)]
        calls = {c.id: i for i in assistants for c in history[i].tool_calls}
        results: dict[str, int] = {}
        for index, message in enumerate(history):
            if isinstance(message, ToolMessage):
                assert message.tool_call_id not in results, f"tool call {message.tool_call_id} has two results"
                results[message.tool_call_id] = index
        assert set(results) <= set(calls), f"results that answer no call: {sorted(set(results) - set(calls))}"
        for call_id, index in results.items():
            assert index > calls[call_id], f"the result of {call_id} comes before its call"
        settled_before = len(history) if not world.running or world.model_waiting else assistants[-1]
        for call_id, index in calls.items():
            if index < settled_before:
                assert call_id in results, f"tool call {call_id} has no result"

    def plan_mode_only_runs_its_capabilities(self) -> None:
        allowed = self.world.plan_mode.capabilities
        for run in self.world.observer.executions:
            if run.request_plan_active or run.session_plan_mode:
                assert run.name in allowed, f"{run.name} ran while Plan Mode was active"

    def no_approval_is_bypassed(self) -> None:
        world = self.world
        gated_names = {"gated", "enter_plan_mode", "exit_plan_mode"}
        for run in world.observer.executions:
            if run.name in gated_names:
                assert run.call_id in world.approved, f"{run.name} {run.call_id} ran without an approval"
        plan_approvals = [t for t in world.observer.transitions if t[0] == "plan_mode" and t[3] == "approve"]
        assert len(plan_approvals) <= world.plan_approvals, "Plan Mode changed without the user's approval"

    def steering_is_answered_once_and_never_lost(self) -> None:
        world = self.world
        appended = [m.text for m in world.history() if isinstance(m, UserMessage)]
        for content, number in world.steered.items():
            count = appended.count(content)
            assert count <= 1, f"steering {content!r} was appended {count} times"
            outcome = world.outcomes.get(number)
            if outcome is None:
                assert count + world.held_steering(content) == 1, f"steering {content!r} is lost or duplicated"
            elif outcome == "completed":
                assert count == 1, f"steering {content!r} of a completed request was never answered"

    def a_running_request_waits_for_someone(self) -> None:
        world = self.world
        if world.running:
            assert world.model_waiting or world.pending(), "the request is stuck: nothing it waits for can come"

    def an_ended_request_leaves_nothing_behind(self) -> None:
        world = self.world
        if world.running:
            return
        assert world.client.agent.running() == []
        assert world.gate.router.waiting() == [] and world.plan_mode.router.waiting() == [], (
            "a wait outlived its request"
        )
        assert world.plan_mode._requests == {}, "Plan Mode kept the state of an ended request"
        assert world.steering._inboxes == {}, "a steering inbox is still routed after its request ended"
        assert world.plan_mode.mode(SESSION) in ("normal", "plan_active")
        assert not any(extension.pending for extension in world.extensions), "an extension still counts a request"
        assert world.observer.in_flight == 0
        assert all(w.state in ("answered", "withdrawn") for w in world.waits), "an approval machine still waits"
        assert all(m.is_final for m in world.inbox_machines), "a steering inbox outlived its request"
        in_plan = int(world.plan_mode.mode(SESSION) != "normal")
        expected = {**world.baseline, "plan_mode.lifecycle": world.baseline["plan_mode.lifecycle"] + in_plan}
        assert bound_models() == expected, "a machine of an ended request is still bound"
        steps = world.client.transitions(SESSION)
        if steps:
            assert [s.dest for s in steps if s.region == "phase"][-1] in FINAL_PHASES
        for error in world.errors:
            assert isinstance(error, ModelError), f"unexpected request error: {error!r}"

    def teardown(self) -> None:
        world = self.world
        try:
            if world.running:
                world.cancel()
                self.an_ended_request_leaves_nothing_behind()
        finally:
            world.close()


test_requests = Requests.TestCase


# fixed scenarios: every invariant is exercised on every run ------------------------

Play = tuple[str, dict[str, Any]]


def start(text: str = "go") -> Play:
    return ("start_request", {"text": text})


def tools(*names: str) -> Play:
    return ("model_step", {"action": MODEL_CALLS, "names": list(names)})


def answer(pick: int = 0, approved: bool = True) -> Play:
    return ("answer_wait", {"pick": pick, "approved": approved})


def noise(kind: str, pick: int = 0) -> Play:
    return ("application_noise", {"kind": kind, "pick": pick})


FINAL: Play = ("model_step", {"action": MODEL_ANSWERS, "names": ["echo"]})
BROKEN: Play = ("model_step", {"action": MODEL_FAILS, "names": ["echo"]})
STEER: Play = ("steer", {})


def play(*steps: Play) -> World:
    """Run ``steps`` as rules of Requests, checking every invariant before and after each; then tear down."""
    machine = Requests()
    try:
        machine.check()
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.check()
    except BaseException:
        machine.world.close()
        raise
    machine.teardown()
    return machine.world


def ran(world: World) -> list[tuple[str, str, bool]]:
    return [(run.call_id, run.name, run.request_plan_active) for run in world.observer.executions]


def results(world: World) -> dict[str, str]:
    return {m.tool_call_id: m.content for m in world.history() if isinstance(m, ToolMessage)}


PLAN_SESSION = (
    start("plan first"),
    tools("enter_plan_mode"),  # t1
    answer(approved=True),
    tools("deploy", "echo", "list_files"),  # t2-t4
    tools("gated"),  # t5
    tools("exit_plan_mode"),  # t6
    noise("misrouted", 1),
    answer(approved=False),
    noise("duplicate"),
    tools("exit_plan_mode"),  # t7
    answer(approved=True),
    tools("deploy"),  # t8
    FINAL,
)


def test_plan_mode_admits_only_its_capabilities_and_changes_only_on_approval() -> None:
    world = play(*PLAN_SESSION)
    assert ran(world) == [
        ("t1", "enter_plan_mode", False),
        ("t4", "list_files", True),
        ("t7", "exit_plan_mode", True),
        ("t8", "deploy", False),
    ]
    outcome = results(world)
    for refused in ("t2", "t3", "t5"):
        assert "is not available in Plan Mode" in outcome[refused]
    assert outcome["t6"].startswith("rejected: the user rejected the plan")
    plan = [t[3] for t in world.observer.transitions if t[0] == "plan_mode"]
    assert plan == ["propose_entry", "approve", "propose_exit", "reject", "propose_exit", "approve"]
    assert world.refused == ["t6"] and world.outcomes == {1: "completed"}


def test_stray_duplicate_malformed_misrouted_and_late_answers_change_nothing() -> None:
    world = play(
        start(),
        tools("gated", "gated", "echo"),  # t1-t3
        noise("stray", 0),
        noise("stray", 2),
        noise("malformed", 1),
        noise("misrouted", 0),
        answer(0, approved=True),
        noise("duplicate"),
        answer(0, approved=False),
        noise("duplicate", 1),
        FINAL,
        start(),
        tools("gated"),  # t4
        noise("cancel"),
        noise("late"),
        noise("duplicate", 2),
    )
    assert ran(world) == [("t3", "echo", False), ("t1", "gated", False)]
    outcome = results(world)
    assert outcome["t2"] == "rejected: declined"
    assert outcome["t4"] == "not completed: request cancelled"
    assert [w.state for w in world.waits] == ["answered", "answered", "withdrawn"]
    assert world.refused == ["t1", "t4"]
    assert world.outcomes == {1: "completed", 2: "cancelled"}


def test_steering_is_answered_in_order_once_and_refused_when_nothing_runs() -> None:
    world = play(
        start(),
        tools("gated"),  # t1
        STEER,  # steer 2
        STEER,  # steer 3
        answer(approved=True),
        FINAL,  # answers steer 2; steer 3 is taken after this model call
        FINAL,  # answers steer 3
        noise("idle_steer"),
        start(),
        STEER,  # steer 4
        BROKEN,
        noise("idle_steer"),
    )
    users = [m.text for m in world.history() if isinstance(m, UserMessage)]
    assert users == ["go", "steer 2", "steer 3", "go"]
    assert world.outcomes == {1: "completed", 2: "failed"}
    assert [type(error) for error in world.errors] == [ModelError]
    phases = [t[4] for t in world.observer.transitions if t[1] == "phase"]
    assert phases.count("steering_interrupt") == 2


# the invariants catch the defects they guard against ------------------------------


def _plan_mode_admits_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    propose = PlanModeExtension.before_tool

    async def only_proposals(self: PlanModeExtension, context: Any, call: ToolCall) -> None:
        if call.name in ("enter_plan_mode", "exit_plan_mode"):
            await propose(self, context, call)

    monkeypatch.setattr(PlanModeExtension, "before_tool", only_proposals)
    monkeypatch.setitem(edges.GUARDS, "tool_in_capabilities", lambda event: True)


def _approvals_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    async def answered_at_once(self: Any, context: Any, key: str, **options: Any) -> dict[str, Any]:
        return {"tool_call_id": key, "approved": True}

    monkeypatch.setattr(ResponseRouter, "wait", answered_at_once)


def _steering_never_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SteeringExtension, "take", lambda self, context: None)
    monkeypatch.setattr(SteeringExtension, "select_next", lambda self, context, reserve: None)


def _steering_taken_but_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    def peek(self: Any) -> UserMessage | None:
        if not self.messages:
            return None
        self.machine.fire("hold")
        message: UserMessage = self.messages[0]
        return message

    monkeypatch.setattr(steering_module._Inbox, "pop", peek)


def _cancelled_calls_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    settle = runtime_module.RequestRun.settle

    async def forgetful(self: Any, call: ToolCall, status: ToolStatus, content: str) -> Any:
        if status is ToolStatus.CANCELLED:
            self.open_calls.pop(call.id, None)
            return None
        return await settle(self, call, status, content)

    monkeypatch.setattr(runtime_module.RequestRun, "settle", forgetful)


def _inboxes_never_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SteeringExtension, "close", lambda self, context: None)


def _admissions_unannounced(monkeypatch: pytest.MonkeyPatch) -> None:
    announce = runtime_module.RequestRun._announce

    async def quiet_admissions(self: Any, step: Any) -> None:
        if step.trigger != "admit_tool":
            await announce(self, step)

    monkeypatch.setattr(runtime_module.RequestRun, "_announce", quiet_admissions)


def _approval_machines_kept_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    unbind = BoundMachine.unbind

    def keep_approvals(self: BoundMachine) -> None:
        if self.definition.name != "approval":
            unbind(self)

    monkeypatch.setattr(BoundMachine, "unbind", keep_approvals)


def _numbering_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    number = runtime_module.RequestRun._number
    skipped: set[int] = set()

    def skip_once(self: Any) -> int:
        # Once a request has numbered 4 events (streamed deltas are numbered inline), skip a number.
        if self.seq >= 4 and id(self) not in skipped:
            skipped.add(id(self))
            self.seq += 1
        return number(self)

    monkeypatch.setattr(runtime_module.RequestRun, "_number", skip_once)


def _steering_applied_unannounced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SteeringExtension, "drain_accepted", lambda self, context: [])


DEFECTS: list[Any] = [
    pytest.param(_numbering_skips, (start(), FINAL), "numbered its events", id="seq-gap"),
    pytest.param(
        _steering_applied_unannounced,
        (start(), STEER, FINAL),
        "steering 'steer 1' of request .* applied before accepted",
        id="steering-unannounced",
    ),
    pytest.param(
        _plan_mode_admits_everything,
        (start(), tools("enter_plan_mode"), answer(), tools("deploy")),
        "deploy ran while Plan Mode was active",
        id="plan-mode-bypassed",
    ),
    pytest.param(_approvals_skipped, (start(), tools("gated")), "gated t1 ran without an approval", id="no-approval"),
    pytest.param(
        _steering_never_taken,
        (start(), STEER, FINAL),
        "steering 'steer 1' of a completed request was never answered",
        id="steering-lost",
    ),
    pytest.param(
        _steering_taken_but_kept,
        (start(), STEER, FINAL),
        "steering 'steer 1' is lost or duplicated",
        id="steering-twice",
    ),
    pytest.param(
        _cancelled_calls_unanswered,
        (start(), tools("gated"), noise("cancel")),
        "tool call t1 has no result",
        id="result-missing",
    ),
    pytest.param(
        _inboxes_never_closed,
        (start(), FINAL),
        "a steering inbox is still routed after its request ended",
        id="inbox-left-open",
    ),
    pytest.param(
        _admissions_unannounced,
        (start(), tools("echo")),
        "announced transitions .* differ",
        id="transition-unannounced",
    ),
    pytest.param(
        _approval_machines_kept_bound,
        (start(), tools("gated"), answer(), FINAL),
        "a machine of an ended request is still bound",
        id="machine-left-bound",
    ),
]


@pytest.mark.parametrize(("inject", "steps", "message"), DEFECTS)
def test_each_invariant_fails_on_the_defect_it_guards_against(
    monkeypatch: pytest.MonkeyPatch, inject: Callable[[pytest.MonkeyPatch], None], steps: tuple[Play, ...], message: str
) -> None:
    play(*steps)  # without the defect the scenario holds every invariant
    inject(monkeypatch)
    with pytest.raises(AssertionError, match=message):
        play(*steps)


def test_the_request_machine_alone_keeps_plan_mode_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the extension's own check gone, the admit_tool guard still refuses what Plan Mode does not offer."""
    propose = PlanModeExtension.before_tool

    async def only_proposals(self: PlanModeExtension, context: Any, call: ToolCall) -> None:
        if call.name in ("enter_plan_mode", "exit_plan_mode"):
            await propose(self, context, call)

    monkeypatch.setattr(PlanModeExtension, "before_tool", only_proposals)
    world = play(*PLAN_SESSION)
    assert [name for _, name, active in ran(world) if active] == ["list_files", "exit_plan_mode"]
    assert results(world)["t2"] == "tool 'deploy' is not available in this request"

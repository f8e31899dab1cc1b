"""Model-checked invariants: random interleavings of live requests on ScriptedModel.

A hypothesis RuleBasedStateMachine drives one agent (Plan Mode, an approval
gate, steering) whose trio loop runs in a worker thread. Each rule does one
thing from outside, the way an application would (answer the model, approve,
reject, send a stray or duplicate response, steer, cancel), then waits until
every task of the loop is blocked, so the checks after each rule see a
quiescent system. Rules are the only source of progress: the model answers
only when a rule says what it answers.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

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
    tool,
)
from orchestrator.events import TransitionEvent
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.steering import STEERING_EVENT, SteeringExtension
from orchestrator.pending import PendingResponse, require_bool

SESSION = "s"
CONFIG = AgentRunConfig(SESSION)
FINAL_PHASES = all_definitions()["request"].main.final_states
TABLE = {
    (d.name, r.name, source, t.trigger, t.dest)
    for d in all_definitions().values()
    for r in d.regions
    for t in r.transitions
    for source in t.source
}
APPROVAL_EVENTS = ("approval", "enter_plan_mode_response", "exit_plan_mode_response")


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
        self.transitions: list[tuple[str, str, str, str, str]] = []
        self.violations: list[str] = []

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
        if not isinstance(event, TransitionEvent):
            return
        self.transitions.append((event.machine, event.region, event.source, event.trigger, event.dest))
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


TOOL_MENU = sorted([*CALLS, "enter_plan_mode", "exit_plan_mode", "list_files"])


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
        self.plan_approvals = 0
        self.requests = 0
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

    def respond(self, name: str, payload: dict[str, Any]) -> list[str]:
        event = ExternalEvent(name, payload)
        accepted: list[str] = self.client.agent.emit_external_event(event, config=CONFIG)
        self.settle()
        return accepted

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

    @precondition(lambda self: not self.world.running and self.world.requests < 4)
    @rule(text=st.sampled_from(["go", "plan first"]))
    def start_request(self, text: str) -> None:
        self.world.start(text)

    @precondition(lambda self: self.world.model_waiting)
    @rule(action=st.integers(0, 11), names=st.lists(st.sampled_from(TOOL_MENU), min_size=1, max_size=3))
    def model_step(self, action: int, names: list[str]) -> None:
        """Mostly tool calls; sometimes a final answer; rarely a provider failure."""
        if action == 0:
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

    @rule()
    def steer(self) -> None:
        """Steering is taken exactly while a request runs."""
        world = self.world
        running = world.running
        content = f"steer {next(world.ids)}"
        accepted = world.respond(STEERING_EVENT, {"content": content})
        assert accepted == (["SteeringExtension"] if running else []), f"steering accepted={accepted} running={running}"
        if accepted:
            world.steered[content] = world.requests

    @rule(
        kind=st.sampled_from(["stray", "blank_steer", "duplicate", "malformed", "idle", "cancel"]),
        pick=st.integers(0, 3),
    )
    def application_noise(self, kind: str, pick: int) -> None:
        """What else the application may do: answers nobody asked for, repeats, garbage, waiting, cancelling."""
        world = self.world
        waits = world.pending()
        if kind == "duplicate" and world.answered:
            event = world.answered[pick % len(world.answered)]
            assert world.respond(event.name, dict(event.payload)) == [], f"{event} was taken twice"
        elif kind == "malformed" and waits:
            wait = waits[pick % len(waits)]
            assert world.respond(wait.response_event, {"tool_call_id": wait.key, "approved": "yes"}) == []
            assert wait in world.pending(), "a malformed response ended the wait"
        elif kind == "stray":
            name = APPROVAL_EVENTS[pick % len(APPROVAL_EVENTS)]
            payload = {"tool_call_id": "nobody-asked", "approved": True}
            assert world.respond(name, payload) == [], "a response nobody waits for was taken"
        elif kind == "blank_steer":
            assert world.respond(STEERING_EVENT, {"content": "  "}) == [], "blank steering was taken"
        elif kind == "cancel" and world.running:
            world.cancel()
        else:
            world.settle()

    # invariants ----------------------------------------------------------------

    @invariant()
    def transitions_are_in_the_tables(self) -> None:
        world = self.world
        taken = list(world.observer.transitions)
        taken += [(s.machine, s.region, s.source, s.trigger, s.dest) for s in world.client.transitions(SESSION)]
        for machine in [*(w.machine for w in world.waits), *world.inbox_machines]:
            taken += [(s.machine, s.region, s.source, s.trigger, s.dest) for s in machine.history]
        unknown = sorted(set(taken) - TABLE)
        assert not unknown, f"transitions outside the definitions: {unknown}"
        assert not world.observer.violations, world.observer.violations

    @invariant()
    def every_tool_call_has_one_result(self) -> None:
        world = self.world
        history = world.history()
        assistants = [i for i, m in enumerate(history) if isinstance(m, AssistantMessage)]
        calls = {c.id: i for i in assistants for c in history[i].tool_calls}
        results = [m.tool_call_id for m in history if isinstance(m, ToolMessage)]
        assert len(results) == len(set(results)), "a tool call has two results"
        assert set(results) <= set(calls), "a result answers no call"
        settled_before = len(history) if not world.running or world.model_waiting else assistants[-1]
        for call_id, index in calls.items():
            if index < settled_before:
                assert call_id in results, f"tool call {call_id} has no result"

    @invariant()
    def plan_mode_only_runs_its_capabilities(self) -> None:
        allowed = self.world.plan_mode.capabilities
        for run in self.world.observer.executions:
            if run.request_plan_active or run.session_plan_mode:
                assert run.name in allowed, f"{run.name} ran while Plan Mode was active"

    @invariant()
    def no_approval_is_bypassed(self) -> None:
        world = self.world
        gated_names = {"gated", "enter_plan_mode", "exit_plan_mode"}
        for run in world.observer.executions:
            if run.name in gated_names:
                assert run.call_id in world.approved, f"{run.name} {run.call_id} ran without an approval"
        plan_approvals = [t for t in world.observer.transitions if t[0] == "plan_mode" and t[3] == "approve"]
        assert len(plan_approvals) <= world.plan_approvals

    @invariant()
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

    @invariant()
    def a_running_request_waits_for_someone(self) -> None:
        world = self.world
        if world.running:
            assert world.model_waiting or world.pending(), "the request is stuck: nothing it waits for can come"

    @invariant()
    def an_ended_request_leaves_nothing_behind(self) -> None:
        world = self.world
        if world.running:
            return
        assert world.client.agent.running() == []
        assert world.pending() == []
        assert world.plan_mode._requests == {}
        assert world.steering._inboxes == {}
        assert world.plan_mode.mode(SESSION) in ("normal", "plan_active")
        assert not any(extension.pending for extension in world.extensions)
        assert all(w.state in ("answered", "withdrawn") for w in world.waits)
        assert all(m.is_final for m in world.inbox_machines), "a steering inbox outlived its request"
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

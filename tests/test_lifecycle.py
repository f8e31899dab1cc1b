"""Tools, failures, cancellation, iteration limits and the request machine path."""

from __future__ import annotations

import threading

import pytest
import trio
from support import Recorder, asks, call, phases

from machines import REQUEST
from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ExtensionEvent,
    ExternalEvent,
    ImagePart,
    MaxIterationsExceeded,
    ModelError,
    ResponseRouter,
    ScriptedModel,
    SessionBusy,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolRejected,
    ToolStatus,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.runtime.pending import require_bool


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("disk on fire")


def tool_messages(client, session: str = "default") -> list[ToolMessage]:  # type: ignore[no-untyped-def]
    return [m for m in client.agent.history.load(session) if isinstance(m, ToolMessage)]


def assert_every_call_has_one_result(history) -> None:  # type: ignore[no-untyped-def]
    calls = [c.id for m in history if isinstance(m, AssistantMessage) for c in m.tool_calls]
    results = [m.tool_call_id for m in history if isinstance(m, ToolMessage)]
    assert sorted(calls) == sorted(results)
    assert len(set(results)) == len(results)


async def test_tool_exception_and_bad_arguments_become_failed_results_and_request_goes_on() -> None:
    model = ScriptedModel(
        [
            asks(call("a", "explode"), call("b", "echo", txt="typo"), call("c", "missing")),
            AssistantMessage("recovered"),
        ]
    )
    client = await create_agent(model, tools=[echo, explode])
    names = [event.name async for event in client.stream("go")]
    assert names.count("tool_failed") == 3
    results = {m.tool_call_id: m for m in tool_messages(client)}
    assert results["a"].status is ToolStatus.FAILED
    assert results["a"].content == "RuntimeError: disk on fire"
    assert "missing required argument(s): text" in results["b"].content
    assert "tool 'missing' is not available" in results["c"].content
    assert model.requests[1].messages[-3:] == tuple(m for m in tool_messages(client))[-3:]
    assert names[-1] == "run_completed"


async def test_tools_of_one_message_run_concurrently_and_serial_tools_alone() -> None:
    running: list[str] = []
    peak: list[int] = []
    release = trio.Event()

    @tool
    async def wait_a(label: str) -> str:
        """Wait until both ran."""
        running.append(label)
        peak.append(len(running))
        if len(running) == 2:
            release.set()
        await release.wait()
        running.remove(label)
        return label

    @tool(serial=True)
    async def alone() -> str:
        """Serial tool."""
        peak.append(len(running) + 1)
        return "alone"

    model = ScriptedModel(
        [asks(call("1", "wait_a", label="x"), call("2", "wait_a", label="y"), call("3", "alone")), AssistantMessage("ok")]
    )
    client = await create_agent(model, tools=[wait_a, alone])
    with trio.fail_after(5):
        await client.run("go")
    assert max(peak[:2]) == 2
    assert peak[2] == 1
    assert {m.tool_call_id for m in tool_messages(client)} == {"1", "2", "3"}


async def test_blocking_tools_marked_thread_run_beside_each_other_in_worker_threads() -> None:
    both_inside = threading.Barrier(2, timeout=10)
    threads: set[int] = set()

    @tool(thread=True)
    def block(label: str) -> str:
        """Block until the other call is running too."""
        threads.add(threading.get_ident())
        both_inside.wait()  # run inline, the first call would hold the loop and the second never start
        return label

    model = ScriptedModel([asks(call("a", "block", label="A"), call("b", "block", label="B")), AssistantMessage("ok")])
    client = await create_agent(model, tools=[block])
    await client.run("go", config=AgentRunConfig("t"))
    results = {m.tool_call_id: (m.status, m.content) for m in tool_messages(client, "t")}
    assert results == {"a": (ToolStatus.SUCCEEDED, "A"), "b": (ToolStatus.SUCCEEDED, "B")}
    assert len(threads) == 2 and threading.get_ident() not in threads


async def test_cancelling_the_consumer_mid_tool_settles_history_and_runs_cancel_hooks() -> None:
    started = trio.Event()

    @tool
    async def slow() -> str:
        """Sleeps."""
        started.set()
        await trio.sleep_forever()
        return "never"

    log: list[tuple[str, ...]] = []
    model = ScriptedModel([asks(call("s1", "slow"), call("s2", "echo", text="quick"))])
    client = await create_agent(model, tools=[slow, echo], extensions=[Recorder(log, "R")])
    seen: list[str] = []
    with trio.move_on_after(5) as scope:
        async for event in client.stream("go", config=AgentRunConfig("s")):
            seen.append(event.name)
            if event.name == "tool_completed":
                scope.cancel()
    assert scope.cancelled_caught
    assert started.is_set()
    history = client.agent.history.load("s")  # type: ignore[union-attr]
    assert_every_call_has_one_result(history)
    by_id = {m.tool_call_id: m for m in tool_messages(client, "s")}
    assert by_id["s1"].status is ToolStatus.CANCELLED
    assert by_id["s2"].status is ToolStatus.SUCCEEDED
    assert client.agent.transitions("s")[-1].dest == "cancelled"
    assert ("R", "on_event", "run_cancelled") in log
    assert client.state("s") is None
    assert client.agent.running() == []


async def test_cancel_scope_around_run_ends_request_cancelled() -> None:
    @tool
    async def slow() -> str:
        """Sleeps."""
        await trio.sleep_forever()
        return ""

    client = await create_agent(ScriptedModel([asks(call("s1", "slow"))]), tools=[slow])
    with trio.move_on_after(0.05):
        await client.run("go", config=AgentRunConfig("s"))
    steps = client.agent.transitions("s")
    assert steps[-1].trigger == "cancel"
    assert steps[-1].source == "awaiting_tool"
    assert tool_messages(client, "s")[0].status is ToolStatus.CANCELLED


async def test_hook_exception_fails_the_request_runs_on_error_and_reaches_the_caller() -> None:
    log: list[tuple[str, ...]] = []

    class Broken(AgentExtension):
        async def after_tool(self, context, call, result, error):  # type: ignore[no-untyped-def]
            raise KeyError("boom")

    model = ScriptedModel([asks(call("x", "echo", text="a")), AssistantMessage("never")])
    client = await create_agent(model, tools=[echo], extensions=[Broken(), Recorder(log, "R")])
    names: list[str] = []
    with pytest.raises(KeyError, match="boom"):
        async for event in client.stream("go", config=AgentRunConfig("s")):
            names.append(event.name)
    assert names[-1] == "run_failed"
    assert ("R", "on_error", "KeyError") in log
    assert client.agent.transitions("s")[-1].dest == "failed"
    assert_every_call_has_one_result(client.agent.history.load("s"))  # type: ignore[union-attr]
    assert ("R", "after_turn") not in log


async def test_model_stream_without_completion_is_a_model_error() -> None:
    class Silent:
        async def stream(self, request):  # type: ignore[no-untyped-def]
            if False:
                yield None

    client = await create_agent(Silent())
    with pytest.raises(ModelError, match="without a completed response"):
        await client.run("hi")


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ((call("a", "echo", text="1"), call("a", "echo", text="2")), "two tool calls with the id 'a'"),
        ((call("", "echo", text="1"),), "without an id"),
        # Ids are compared as cleaned: two lone surrogates both become U+FFFD.
        (
            (call("a\ud800", "echo", text="1"), call("a\udfff", "echo", text="2")),
            "two tool calls with the id 'a\ufffd'",
        ),
    ],
)
async def test_tool_calls_without_distinct_ids_are_a_model_error_before_any_tool_runs(calls, message) -> None:  # type: ignore[no-untyped-def]
    ran: list[str] = []

    @tool
    def echo(text: str) -> str:
        """Echo text back."""
        ran.append(text)
        return text

    client = await create_agent(ScriptedModel([asks(*calls), AssistantMessage("done")]), tools=[echo])
    with pytest.raises(ModelError, match=message):
        await client.run("go", config=AgentRunConfig("ids"))
    assert ran == []
    assert client.agent.history.load("ids") == [UserMessage("go")]
    assert client.agent.transitions("ids")[-1].source == "awaiting_model"
    assert client.agent.transitions("ids")[-1].dest == "failed"


async def test_input_and_tool_arguments_of_the_wrong_type_are_refused_clearly() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("never")]))
    with pytest.raises(TypeError, match="input must be a str, a UserMessage or a sequence of content parts, got int"):
        await client.run(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ToolCall.arguments must be a dict"):
        call_with_list = ToolCall("c", "echo", ["not", "an", "object"])  # type: ignore[arg-type]
        del call_with_list
    assert client.agent.running() == []


async def test_max_iterations_ends_with_a_clear_error() -> None:
    model = ScriptedModel([asks(call("c", "echo", text="again"))], repeat_last=True)
    client = await create_agent(model, tools=[echo], max_iterations=3)
    with pytest.raises(MaxIterationsExceeded, match="max_iterations=3"):
        await client.run("loop", config=AgentRunConfig("s"))
    assert len(model.requests) == 3
    assert client.agent.transitions("s")[-1].dest == "failed"


async def test_the_last_settled_turn_gets_after_turn_before_max_iterations_fails_the_request() -> None:
    log: list[tuple[str, ...]] = []
    model = ScriptedModel([asks(call("c", "echo", text="again"))], repeat_last=True)
    client = await create_agent(model, tools=[echo], max_iterations=2, extensions=[Recorder(log)])
    with pytest.raises(MaxIterationsExceeded):
        await client.run("loop", config=AgentRunConfig("s"))
    hooks = [entry[1] for entry in log if entry[1] in ("after_turn", "before_turn", "on_error")]
    assert hooks == ["before_turn", "after_turn", "before_turn", "after_turn", "on_error"]
    assert [(s.source, s.dest) for s in client.agent.transitions("s")][-2:] == [
        ("awaiting_tool", "turn_settled"),
        ("turn_settled", "failed"),
    ]


async def test_a_second_request_in_a_busy_session_is_refused() -> None:
    gate = trio.Event()

    @tool
    async def hold() -> str:
        """Hold."""
        await gate.wait()
        return "ok"

    client = await create_agent(ScriptedModel([asks(call("h", "hold")), AssistantMessage("one")]), tools=[hold])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run, "first")
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(SessionBusy):
            await client.run("second")
        gate.set()


async def test_history_carries_over_and_multimodal_input_reaches_the_model() -> None:
    model = ScriptedModel([AssistantMessage("one"), AssistantMessage("two")])
    client = await create_agent(model, system_prompt="sys")
    await client.run("first", config=AgentRunConfig("s"))
    picture = UserMessage((TextPart("what is this?"), ImagePart(url="https://example.test/cat.png")))
    await client.run(picture, config=AgentRunConfig("s"))
    sent = model.requests[1].messages
    assert [m.role for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[-1] == picture


def approval_extension(router: ResponseRouter) -> AgentExtension:
    class Approval(AgentExtension):
        async def before_tool(self, context, call):  # type: ignore[no-untyped-def]
            answer = await router.wait(
                context,
                call.id,
                response_event="approve_response",
                validate=require_bool("ok"),
                announce=ExtensionEvent(name="approve", payload={"tool_call_id": call.id}),
            )
            if not answer["ok"]:
                raise ToolRejected("declined by the user")

        def accept(self, config, event):  # type: ignore[no-untyped-def]
            return router.accept(config, event)

    return Approval()


async def test_external_events_route_by_session_and_tool_call_id() -> None:
    router = ResponseRouter()
    ext = approval_extension(router)
    model = ScriptedModel([asks(call("same-id", "echo", text="x")), AssistantMessage("done")])
    client = await create_agent(model, tools=[echo], extensions=[ext])
    seen_states: list[str | None] = []

    async def consume(session: str, approve: bool) -> list[str]:
        names = []
        async for event in client.stream("go", config=AgentRunConfig(session)):
            names.append(event.name)
            if event.name == "approve":
                await trio.testing.wait_all_tasks_blocked()
                seen_states.append(client.state(session))
                wrong = client.agent.emit_external_event(
                    ExternalEvent("approve_response", {"tool_call_id": "same-id", "ok": True}),
                    config=AgentRunConfig("nobody"),
                )
                assert wrong == []
                taken = client.agent.emit_external_event(
                    ExternalEvent("approve_response", {"tool_call_id": event.payload["tool_call_id"], "ok": approve}),
                    config=AgentRunConfig(event.session_id),
                )
                assert taken == ["Approval"]
        return names

    model.steps = [asks(call("same-id", "echo", text="x")), asks(call("same-id", "echo", text="x"))]
    model.add(AssistantMessage("done a"), AssistantMessage("done b"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume, "a", True)
        nursery.start_soon(consume, "b", False)
    assert seen_states == ["awaiting_approval", "awaiting_approval"]
    assert tool_messages(client, "a")[0].status is ToolStatus.SUCCEEDED
    assert tool_messages(client, "b")[0].status is ToolStatus.FAILED
    assert tool_messages(client, "b")[0].content == "rejected: declined by the user"
    assert router.waiting() == []


async def test_emit_external_event_from_a_plain_thread_wakes_the_waiting_request() -> None:
    router = ResponseRouter()
    client = await create_agent(
        ScriptedModel([asks(call("t1", "echo", text="x")), AssistantMessage("done")]),
        tools=[echo],
        extensions=[approval_extension(router)],
    )
    answers: list[list[str]] = []

    def answer_from_thread(tool_call_id: str) -> None:
        event = ExternalEvent("approve_response", {"tool_call_id": tool_call_id, "ok": True})
        answers.append(client.agent.emit_external_event(event, config=AgentRunConfig("default")))
        answers.append(client.agent.emit_external_event(event, config=AgentRunConfig("default")))

    threads: list[threading.Thread] = []
    with trio.fail_after(5):
        async for event in client.stream("go"):
            if event.name == "approve":
                thread = threading.Thread(target=answer_from_thread, args=(event.payload["tool_call_id"],))
                thread.start()
                threads.append(thread)
    for thread in threads:
        thread.join()
    assert answers == [["Approval"], []]
    assert tool_messages(client)[0].status is ToolStatus.SUCCEEDED


async def test_cancelling_while_waiting_for_approval_leaves_nothing_pending() -> None:
    router = ResponseRouter()
    client = await create_agent(
        ScriptedModel([asks(call("w", "echo", text="x"))]), tools=[echo], extensions=[approval_extension(router)]
    )
    with trio.move_on_after(5) as scope:
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "approve":
                assert len(router.waiting("s")) == 1
                scope.cancel()
    assert router.waiting() == []
    steps = client.agent.transitions("s")
    assert [s.trigger for s in steps if s.region == "phase"][-2:] == ["resume", "cancel"]
    late = client.agent.emit_external_event(
        ExternalEvent("approve_response", {"tool_call_id": "w", "ok": True}), config=AgentRunConfig("s")
    )
    assert late == []


async def test_every_transition_taken_is_an_edge_of_the_generated_machine() -> None:
    model = ScriptedModel([asks(call("1", "echo", text="a"), call("2", "explode")), AssistantMessage("fine")])
    client = await create_agent(model, tools=[echo, explode])
    events = [event async for event in client.stream("go", config=AgentRunConfig("s"))]
    steps = client.agent.transitions("s")
    assert phases(events) == [(s.source, s.trigger, s.dest) for s in steps if s.region == "phase"]
    for step in steps:
        region = REQUEST.region(step.region)
        edges = region.edges(step.trigger, step.source)
        assert step.dest in {edge.dest for edge in edges}, step
    assert phases(events) == [
        ("idle", "start", "setup"),
        ("setup", "request_model", "awaiting_model"),
        ("awaiting_model", "respond", "awaiting_tool"),
        ("awaiting_tool", "settle_turn", "turn_settled"),
        ("turn_settled", "request_model", "awaiting_model"),
        ("awaiting_model", "answer", "answered"),
        ("answered", "conclude", "concluding"),
        ("concluding", "complete", "completed"),
    ]


async def test_events_carry_session_and_request_ids() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("hello there")]))
    events = [e async for e in client.stream("hi", config=AgentRunConfig("s9", request_id="r1"))]
    assert {(e.session_id, e.request_id) for e in events} == {("s9", "r1")}
    names = [e.name for e in events]
    assert names[0] == "transition" and names[1] == "run_started"
    assert names[-1] == "run_completed"
    assert "".join(e.payload["text"] for e in events if e.name == "text_delta") == "hello there"


async def test_compact_restores_and_stores_without_a_model_call() -> None:
    class Summarize(AgentExtension):
        async def on_compact(self, context):  # type: ignore[no-untyped-def]
            context.replace_messages([UserMessage("summary of earlier talk")])

    model = ScriptedModel([AssistantMessage("one")])
    client = await create_agent(model, extensions=[Summarize()])
    await client.run("first", config=AgentRunConfig("s"))
    await client.agent.compact(AgentRunConfig("s"))
    assert len(model.requests) == 1
    assert client.agent.history.load("s") == [UserMessage("summary of earlier talk")]  # type: ignore[union-attr]
    assert [s.trigger for s in client.agent.transitions("s")] == ["compact", "finish_compaction"]


async def test_closing_or_abandoning_a_stream_cancels_its_request() -> None:
    @tool
    async def slow() -> str:
        """Sleeps."""
        await trio.sleep_forever()
        return ""

    client = await create_agent(ScriptedModel([asks(call("s1", "slow"))], repeat_last=True), tools=[slow])
    async with client.stream("go", config=AgentRunConfig("closed")) as events:
        async for event in events:
            if event.name == "tool_started":
                break
    assert client.agent.transitions("closed")[-1].dest == "cancelled"

    async for event in client.stream("go", config=AgentRunConfig("dropped")):
        if event.name == "tool_started":
            break
    with trio.fail_after(5):
        while client.agent.running():
            await trio.sleep(0.01)
    assert client.agent.transitions("dropped")[-1].dest == "cancelled"
    assert tool_messages(client, "dropped")[0].status is ToolStatus.CANCELLED


async def test_plan_active_mode_offers_and_executes_only_its_capability_set() -> None:
    class Restrict(AgentExtension):
        async def on_state(self, context):  # type: ignore[no-untyped-def]
            await context.enter_plan_mode({"echo"})
            assert context.plan_mode_active

    model = ScriptedModel([asks(call("1", "explode"), call("2", "echo", text="ok")), AssistantMessage("done")])
    client = await create_agent(model, tools=[echo, explode], extensions=[Restrict()])
    await client.run("go", config=AgentRunConfig("s"))
    assert [t.name for t in model.requests[0].tools] == ["echo"]
    results = {m.tool_call_id: m for m in tool_messages(client, "s")}
    assert results["1"].status is ToolStatus.FAILED
    assert "not available" in results["1"].content
    assert results["2"].status is ToolStatus.SUCCEEDED
    mode_steps = [(s.source, s.trigger, s.dest) for s in client.agent.transitions("s") if s.region == "mode"]
    assert mode_steps == [("normal", "enter_plan", "plan_active"), ("plan_active", "admit_tool", "plan_active")]


async def test_an_answer_given_while_extensions_still_handle_the_announcement_is_taken() -> None:
    router = ResponseRouter()

    class SlowObserver(AgentExtension):
        async def on_event(self, context, event):  # type: ignore[no-untyped-def]
            if event.name == "approve":
                await trio.sleep(0.01)

    client = await create_agent(
        ScriptedModel([asks(call("r", "echo", text="x")), AssistantMessage("done")]),
        tools=[echo],
        extensions=[approval_extension(router), SlowObserver()],
    )
    taken: list[list[str]] = []
    with trio.fail_after(5):
        async for event in client.stream("go"):
            if event.name == "approve":
                answer = ExternalEvent("approve_response", {"tool_call_id": "r", "ok": True})
                taken.append(client.agent.emit_external_event(answer, config=AgentRunConfig()))
    assert taken == [["Approval"]]


class _BreaksOn(AgentExtension):
    """An on_event subscriber that raises (or lingers) on the events ``when`` picks."""

    def __init__(self, when, linger: bool = False) -> None:  # type: ignore[no-untyped-def]
        self.when = when
        self.linger = linger

    async def on_event(self, context, event):  # type: ignore[no-untyped-def]
        if self.when(event):
            if self.linger:
                await trio.sleep_forever()
            raise RuntimeError(f"subscriber broke on {event.name}")


def _opens_calls(event) -> bool:  # type: ignore[no-untyped-def]
    return event.name == "message_appended" and isinstance(event.message, AssistantMessage)


@pytest.mark.parametrize("linger", [False, True], ids=["subscriber-raises", "cancelled-meanwhile"])
async def test_calls_of_a_message_interrupted_while_it_is_published_still_get_their_one_result(linger: bool) -> None:
    log: list[tuple[str, ...]] = []
    model = ScriptedModel([asks(call("c1", "echo", text="x"), call("c2", "echo", text="y")), AssistantMessage("no")])
    client = await create_agent(model, tools=[echo], extensions=[_BreaksOn(_opens_calls, linger), Recorder(log, "R")])
    with trio.move_on_after(0.2 if linger else 5):
        if linger:
            await client.run("go", config=AgentRunConfig("s"))
        else:
            with pytest.raises(RuntimeError, match="subscriber broke on message_appended"):
                await client.run("go", config=AgentRunConfig("s"))
    history = client.agent.history.load("s")  # type: ignore[union-attr]
    assert_every_call_has_one_result(history)
    assert {m.tool_call_id: m.status for m in tool_messages(client, "s")} == {
        "c1": ToolStatus.CANCELLED,
        "c2": ToolStatus.CANCELLED,
    }
    assert client.agent.transitions("s")[-1].dest == ("cancelled" if linger else "failed")
    assert (("R", "on_event", "run_cancelled") in log) is linger
    assert (("R", "on_error", "RuntimeError") in log) is not linger


@pytest.mark.parametrize(
    ("label", "when", "dest"),
    [
        ("every event", lambda e: True, "failed"),
        ("every tool result", lambda e: isinstance(getattr(e, "message", None), ToolMessage), "failed"),
        ("the failure", lambda e: e.name == "run_failed" or getattr(e, "trigger", "") in ("respond", "fail"), "failed"),
        ("the completion", lambda e: e.name == "run_completed" or getattr(e, "trigger", "") == "complete", "completed"),
    ],
)
async def test_a_broken_subscriber_fails_a_live_request_but_cannot_stop_it_from_ending(label, when, dest) -> None:  # type: ignore[no-untyped-def]
    @tool(name="echo", serial=True)
    def echo_alone(text: str) -> str:
        """Echo text back, one call at a time: the second call is still open when the first fails."""
        return text

    log: list[tuple[str, ...]] = []
    model = ScriptedModel([asks(call("c1", "echo", text="x"), call("c2", "echo", text="y")), AssistantMessage("ok")])
    client = await create_agent(model, tools=[echo_alone], extensions=[_BreaksOn(when), Recorder(log, "R")])
    names: list[str] = []
    if dest == "failed":
        with pytest.raises(RuntimeError, match="subscriber broke"):
            async for event in client.stream("go", config=AgentRunConfig("s")):
                names.append(event.name)
        assert names[-1] == "run_failed"
        assert ("R", "on_error", "RuntimeError") in log
    else:
        names = [event.name async for event in client.stream("go", config=AgentRunConfig("s"))]
        assert names[-1] == "run_completed"
        assert [hook for _, hook, *_ in log if hook in ("on_success", "on_error")] == ["on_success"]
    assert client.agent.transitions("s")[-1].dest == dest
    assert_every_call_has_one_result(client.agent.history.load("s"))  # type: ignore[union-attr]
    assert client.state("s") is None


async def test_a_broken_subscriber_cannot_stop_a_cancelled_request_from_ending_cancelled() -> None:
    log: list[tuple[str, ...]] = []

    @tool
    async def slow() -> str:
        """Sleeps."""
        await trio.sleep_forever()
        return ""

    def when(event) -> bool:  # type: ignore[no-untyped-def]
        message = getattr(event, "message", None)
        cancelled_result = isinstance(message, ToolMessage) and message.status is ToolStatus.CANCELLED
        return cancelled_result or getattr(event, "trigger", "") == "cancel"

    client = await create_agent(
        ScriptedModel([asks(call("s1", "slow"))]), tools=[slow], extensions=[_BreaksOn(when), Recorder(log, "R")]
    )
    with trio.move_on_after(5) as scope:
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "tool_started":
                scope.cancel()
    assert client.agent.transitions("s")[-1].dest == "cancelled"
    assert ("R", "on_event", "run_cancelled") in log
    assert tool_messages(client, "s")[0].status is ToolStatus.CANCELLED
    assert client.state("s") is None


@pytest.mark.parametrize("leave", ["break", "raise"])
async def test_the_next_request_of_a_session_waits_for_a_dropped_stream_instead_of_session_busy(leave: str) -> None:
    @tool
    async def slow() -> str:
        """Sleeps."""
        await trio.sleep_forever()
        return ""

    log: list[tuple[str, ...]] = []
    model = ScriptedModel([asks(call("s1", "slow")), AssistantMessage("second answer")])
    client = await create_agent(model, tools=[slow], extensions=[Recorder(log, "R")])

    async def consume() -> None:
        async for event in client.stream("first", config=AgentRunConfig("s")):
            if event.name == "tool_started":
                if leave == "raise":
                    raise ValueError("consumer bug")
                break

    if leave == "raise":
        with pytest.raises(ValueError, match="consumer bug"):
            await consume()
    else:
        await consume()
    with trio.fail_after(5):
        result = await client.run("second", config=AgentRunConfig("s"))
    assert result.content == "second answer"
    assert ("R", "on_event", "run_cancelled") in log
    history = client.agent.history.load("s")  # type: ignore[union-attr]
    assert_every_call_has_one_result(history)
    assert [m.content for m in history if isinstance(m, UserMessage)] == ["first", "second"]
    assert tool_messages(client, "s")[0].status is ToolStatus.CANCELLED


async def test_a_stream_that_is_still_held_keeps_its_session_busy() -> None:
    @tool
    async def slow() -> str:
        """Sleeps."""
        await trio.sleep_forever()
        return ""

    client = await create_agent(ScriptedModel([asks(call("s1", "slow"))]), tools=[slow])
    async with client.stream("first", config=AgentRunConfig("s")) as events:
        async for event in events:
            if event.name == "tool_started":
                break
        with pytest.raises(SessionBusy):
            await client.run("second", config=AgentRunConfig("s"))
    assert client.state("s") is None


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt or SystemExit raised inside a tool."""


@pytest.mark.parametrize("how", ["run", "stream"])
async def test_a_base_exception_from_a_tool_fails_the_request_and_reaches_the_caller(how: str) -> None:
    @tool
    async def interrupted() -> str:
        """Raises a BaseException."""
        raise _Interrupt("stop")

    log: list[tuple[str, ...]] = []
    model = ScriptedModel([asks(call("i", "interrupted"), call("e", "echo", text="x")), AssistantMessage("never")])
    client = await create_agent(model, tools=[interrupted, echo], extensions=[Recorder(log, "R")])
    names: list[str] = []
    with pytest.raises(_Interrupt, match="stop"):
        if how == "run":
            await client.run("go", config=AgentRunConfig("s"))
        else:
            async for event in client.stream("go", config=AgentRunConfig("s")):
                names.append(event.name)
    if how == "stream":
        assert names[-1] == "run_failed"
    assert ("R", "on_error", "_Interrupt") in log
    assert client.agent.transitions("s")[-1].dest == "failed"
    assert_every_call_has_one_result(client.agent.history.load("s"))  # type: ignore[union-attr]
    assert client.state("s") is None


async def test_transitions_of_the_latest_request_outlive_its_messages() -> None:
    import gc
    import weakref

    contexts: list[weakref.ref[object]] = []

    class Keep(AgentExtension):
        async def before_run(self, context):  # type: ignore[no-untyped-def]
            contexts.append(weakref.ref(context))

    client = await create_agent(ScriptedModel([AssistantMessage("ok")]), extensions=[Keep()])
    await client.run("go", config=AgentRunConfig("s"))
    gc.collect()
    assert contexts[0]() is None
    assert [s.trigger for s in client.transitions("s") if s.region == "phase"][-1] == "complete"


async def test_a_request_cancelled_as_it_completes_still_announces_its_completion() -> None:
    seen: list[str] = []

    class CancelsOnCompletion(AgentExtension):
        def __init__(self, scope: trio.CancelScope) -> None:
            self.scope = scope

        async def on_event(self, context, event):  # type: ignore[no-untyped-def]
            seen.append(event.name)
            if getattr(event, "trigger", "") == "complete":
                self.scope.cancel()
                await trio.sleep(0)

    scope = trio.CancelScope()
    client = await create_agent(ScriptedModel([AssistantMessage("ok")]), extensions=[CancelsOnCompletion(scope)])
    with scope:
        await client.run("go", config=AgentRunConfig("s"))
    assert seen[-1] == "run_completed"
    assert client.agent.transitions("s")[-1].dest == "completed"
    assert client.state("s") is None


def test_the_library_writes_nothing_to_stderr_unless_the_application_configures_logging() -> None:
    import subprocess
    import sys

    script = (
        "from orchestrator import AgentRunConfig, ExternalEvent\n"
        "from orchestrator.extensions.steering import SteeringExtension\n"
        "refused = SteeringExtension().accept(AgentRunConfig('s'), ExternalEvent('steering_message', {'content': ''}))\n"
        "print(refused)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert (done.stdout, done.stderr) == ("False\n", "")

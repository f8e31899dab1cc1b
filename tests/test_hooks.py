"""Hook order, barriers, priority and middleware."""

from __future__ import annotations

import pytest
from support import Recorder, asks, call

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ScriptedModel,
    SystemMessage,
    ToolResult,
    create_agent,
    tool,
)


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


TWO_TURNS = [asks(call("c1", "echo", text="hi")), AssistantMessage("done")]


async def test_two_turn_request_runs_hooks_in_documented_order() -> None:
    log: list[tuple[str, ...]] = []
    first, second = Recorder(log, "A"), Recorder(log, "B")
    client = await create_agent(ScriptedModel(TWO_TURNS), extensions=[first, second], tools=[echo])
    result = await client.run("go")
    assert result.content == "done"

    def both(hook: str, *detail: str) -> list[tuple[str, ...]]:
        return [("A", hook, *detail), ("B", hook, *detail)]

    expected = [
        *both("on_tool"),
        *both("on_state"),
        *both("on_message"),
        *both("before_run"),
        *both("before_turn"),
        *both("before_model"),
        *both("on_model_request"),
        *both("after_model"),
        *both("before_tool", "c1"),
        *both("on_tool_call", "c1"),
        *both("after_tool", "c1"),
        *both("after_turn"),
        *both("before_turn"),
        *both("before_model"),
        *both("on_model_request"),
        *both("after_model"),
        *both("after_turn"),
        *both("after_run"),
        *both("on_success"),
    ]
    assert log == expected


async def test_every_on_tool_finishes_before_any_on_state() -> None:
    seen: list[tuple[str, set[str]]] = []

    class Registers(AgentExtension):
        def __init__(self, name: str, tool_name: str) -> None:
            self.name = name
            self.tool_name = tool_name

        async def on_tool(self, context):  # type: ignore[no-untyped-def]
            context.register_tool(tool(name=self.tool_name)(lambda: "x"))

        async def on_state(self, context):  # type: ignore[no-untyped-def]
            seen.append((self.name, set(context.tools)))

    client = await create_agent(
        ScriptedModel([AssistantMessage("ok")]),
        extensions=[Registers("one", "alpha"), Registers("two", "beta")],
    )
    await client.run("go")
    assert seen == [("one", {"alpha", "beta"}), ("two", {"alpha", "beta"})]


async def test_priority_orders_extensions_and_ties_keep_registration_order() -> None:
    log: list[tuple[str, ...]] = []
    extensions = [Recorder(log, "late", priority=10), Recorder(log, "first", priority=-5), Recorder(log, "tie")]
    extensions.append(Recorder(log, "tie2"))
    client = await create_agent(ScriptedModel([AssistantMessage("ok")]), extensions=extensions)
    await client.run("go")
    order = [name for name, hook, *_ in log if hook == "on_tool"]
    assert order == ["first", "tie", "tie2", "late"]


async def test_duplicate_extension_names_are_refused() -> None:
    with pytest.raises(ValueError, match="named 'Recorder'"):
        await create_agent(ScriptedModel([]), extensions=[Recorder([]), Recorder([])])


async def test_name_defaults_to_class_and_can_be_assigned() -> None:
    class Custom(AgentExtension):
        pass

    class Fixed(AgentExtension):
        name = "fixed"

    custom = Custom()
    assert custom.name == "Custom"
    custom.name = "renamed"
    assert custom.name == "renamed"
    assert Fixed().name == "fixed"


async def test_before_model_edits_reach_the_provider_and_request_is_rebuilt() -> None:
    model = ScriptedModel([AssistantMessage("ok")])

    class Prompt(AgentExtension):
        async def on_state(self, context):  # type: ignore[no-untyped-def]
            context.add_message(SystemMessage(content="Use concise answers."), index=0)

        async def before_model(self, context, request):  # type: ignore[no-untyped-def]
            offered = {definition.name for definition in request.tools}
            if "echo" in offered:
                context.add_message(SystemMessage(content="Read existing files before editing."))

    client = await create_agent(model, extensions=[Prompt()], tools=[echo], system_prompt="base")
    await client.run("go")
    sent = model.requests[0].messages
    assert [m.content for m in sent if isinstance(m, SystemMessage)] == [
        "Use concise answers.",
        "base",
        "Read existing files before editing.",
    ]


async def test_on_tool_call_middleware_can_adjust_arguments_and_transform_result() -> None:
    class Shout(AgentExtension):
        async def on_tool_call(self, context, call, call_next):  # type: ignore[no-untyped-def]
            call.arguments["text"] = call.arguments["text"] + "!"
            result = await call_next(call)
            return ToolResult(result.content.upper())

    model = ScriptedModel(TWO_TURNS)
    client = await create_agent(model, extensions=[Shout()], tools=[echo])
    await client.run("go")
    tool_message = model.requests[1].messages[-1]
    assert tool_message.content == "HI!"


async def test_after_tool_changes_are_what_gets_appended() -> None:
    class Redact(AgentExtension):
        async def after_tool(self, context, call, result, error):  # type: ignore[no-untyped-def]
            result.content = "[redacted]"

    model = ScriptedModel(TWO_TURNS)
    client = await create_agent(model, extensions=[Redact()], tools=[echo])
    await client.run("go", config=AgentRunConfig("s"))
    history = client.agent.history.load("s")  # type: ignore[union-attr]
    assert history[2].content == "[redacted]"
    assert model.requests[1].messages[-1].content == "[redacted]"


async def test_on_message_replaces_the_input_before_it_is_appended_once() -> None:
    from orchestrator import UserMessage

    class Mode(AgentExtension):
        async def on_message(self, context):  # type: ignore[no-untyped-def]
            context.input_message = UserMessage("[plan] " + context.input_message.text)

    model = ScriptedModel([AssistantMessage("ok")])
    client = await create_agent(model, extensions=[Mode()])
    await client.run("migrate", config=AgentRunConfig("s"))
    users = [m for m in client.agent.history.load("s") if isinstance(m, UserMessage)]  # type: ignore[union-attr]
    assert [m.content for m in users] == ["[plan] migrate"]


async def test_pending_is_true_only_while_a_request_runs() -> None:
    observed: list[bool] = []

    class Watch(AgentExtension):
        async def before_run(self, context):  # type: ignore[no-untyped-def]
            observed.append(self.pending)

    watch = Watch()
    client = await create_agent(ScriptedModel([AssistantMessage("ok")]), extensions=[watch])
    assert not watch.pending
    await client.run("go")
    assert observed == [True]
    assert not watch.pending


async def test_on_tool_call_may_answer_alone_return_plain_values_and_fail_like_a_tool() -> None:
    from orchestrator import ToolMessage, ToolStatus

    class Layer(AgentExtension):
        async def on_tool_call(self, context, call, call_next):  # type: ignore[no-untyped-def]
            text = call.arguments["text"]
            if text == "cached":
                return ToolResult("from cache")
            if text == "plain":
                return {"wrapped": (await call_next(call)).content}
            if text == "bad status":
                return ToolResult("x", "unknown")
            raise LookupError("wrapper broke")

    calls = [call(str(i), "echo", text=t) for i, t in enumerate(["cached", "plain", "bad status", "raise"])]
    model = ScriptedModel([asks(*calls), AssistantMessage("done")])
    client = await create_agent(model, extensions=[Layer()], tools=[echo])
    assert (await client.run("go", config=AgentRunConfig("s"))).content == "done"
    sent = {m.tool_call_id: (m.status, m.content) for m in model.requests[1].messages if isinstance(m, ToolMessage)}
    assert sent["0"] == (ToolStatus.SUCCEEDED, "from cache")
    assert sent["1"] == (ToolStatus.SUCCEEDED, '{"wrapped": "plain"}')
    assert sent["2"][0] is ToolStatus.FAILED
    assert "ToolResult.status must be one of" in sent["2"][1]
    assert sent["3"] == (ToolStatus.FAILED, "LookupError: wrapper broke")


async def test_subscribers_receive_the_replaced_input_once_before_before_run() -> None:
    from orchestrator import UserMessage
    from orchestrator.events import MessageAppendedEvent

    seen: list[str] = []

    class Mode(AgentExtension):
        async def on_message(self, context):  # type: ignore[no-untyped-def]
            context.input_message = UserMessage("[plan] " + context.input_message.text)

        async def before_run(self, context):  # type: ignore[no-untyped-def]
            seen.append("before_run")

    class Store(AgentExtension):
        async def on_event(self, context, event):  # type: ignore[no-untyped-def]
            if isinstance(event, MessageAppendedEvent) and isinstance(event.message, UserMessage):
                seen.append(f"stored {event.message.text}")

    client = await create_agent(ScriptedModel([AssistantMessage("ok")]), extensions=[Mode(), Store()])
    await client.run("migrate")
    assert seen == ["stored [plan] migrate", "before_run"]


async def test_on_model_request_may_replace_the_request_add_events_or_answer_alone() -> None:
    import attrs

    from orchestrator.model import ResponseCompletedEvent, TextDeltaEvent

    class Hint(AgentExtension):
        async def on_model_request(self, context, request, call_next):  # type: ignore[no-untyped-def]
            yield TextDeltaEvent("[thinking] ")
            async for event in call_next(attrs.evolve(request, messages=(*request.messages, SystemMessage("hint")))):
                yield event

    class Cache(AgentExtension):
        async def on_model_request(self, context, request, call_next):  # type: ignore[no-untyped-def]
            if any(m.role == "tool" for m in request.messages):
                yield ResponseCompletedEvent(AssistantMessage("cached"))
                return
            async for event in call_next(request):
                yield event

    model = ScriptedModel([asks(call("c1", "echo", text="hi")), AssistantMessage("unused")])
    client = await create_agent(model, extensions=[Hint(), Cache()], tools=[echo])
    events = [event async for event in client.stream("go")]
    assert len(model.requests) == 1
    assert model.requests[0].messages[-1] == SystemMessage("hint")
    assert [e.payload["text"] for e in events if e.name == "text_delta"] == ["[thinking] ", "[thinking] "]
    assert events[-1].payload["result"] == AssistantMessage("cached")


async def test_on_success_errors_go_through_on_error_and_prevent_run_completed() -> None:
    log: list[tuple[str, ...]] = []

    class Save(AgentExtension):
        async def on_success(self, context, result):  # type: ignore[no-untyped-def]
            raise OSError("disk full")

    class BrokenHandler(AgentExtension):
        async def on_error(self, context, error):  # type: ignore[no-untyped-def]
            raise RuntimeError("handler broke too")

    client = await create_agent(
        ScriptedModel([AssistantMessage("ok")]), extensions=[Save(), BrokenHandler(), Recorder(log, "R")]
    )
    names: list[str] = []
    with pytest.raises(OSError, match="disk full"):
        async for event in client.stream("go", config=AgentRunConfig("s")):
            names.append(event.name)
    assert "run_completed" not in names
    assert names[-1] == "run_failed"
    assert ("R", "on_error", "OSError") in log
    steps = client.agent.transitions("s")
    assert (steps[-1].source, steps[-1].dest) == ("concluding", "failed")


async def test_pending_counts_every_request_of_a_shared_instance_across_agents_and_outcomes() -> None:
    import trio

    shared = AgentExtension()
    gate = trio.Event()

    @tool
    async def hold() -> str:
        """Hold until released."""
        await gate.wait()
        return "ok"

    @tool
    def explode() -> str:
        """Fails the request through a hook."""
        return "x"

    class FailAfter(AgentExtension):
        async def after_tool(self, context, call, result, error):  # type: ignore[no-untyped-def]
            if call.name == "explode":
                raise RuntimeError("boom")

    holding = await create_agent(
        ScriptedModel([asks(call("h", "hold")), AssistantMessage("a")]), tools=[hold], extensions=[shared]
    )
    failing = await create_agent(
        ScriptedModel([asks(call("e", "explode"))], repeat_last=True), tools=[explode], extensions=[shared, FailAfter()]
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(holding.run, "x")
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(RuntimeError, match="boom"):
            await failing.run("y")
        with trio.move_on_after(0):
            await failing.run("z")
        assert shared.pending
        gate.set()
    assert not shared.pending

"""Usage limits: each limit at its boundary (N allowed, N+1 refused), counted by a ledger of real executions."""

from __future__ import annotations

from typing import Any

import pytest
from support import asks, call, phases

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ScriptedModel,
    SystemMessage,
    ToolMessage,
    ToolStatus,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
    create_agent,
    tool,
)
from orchestrator.events import AgentEvent, UsageLimitReachedEvent
from orchestrator.model import ModelSettings, ResponseCompletedEvent


def ledger_tool(ledger: list[str], name: str = "work") -> Any:
    @tool(name=name)
    def work(n: int) -> str:
        """Do one piece of work."""
        ledger.append(f"{name}:{n}")
        return f"done {n}"

    return work


def calls(*numbers: int, name: str = "work") -> AssistantMessage:
    return asks(*[call(f"c{n}", name, n=n) for n in numbers])


async def _collect(client: Any, text: str, config: AgentRunConfig) -> tuple[list[AgentEvent], BaseException | None]:
    seen: list[AgentEvent] = []
    try:
        async for event in client.stream(text, config=config):
            seen.append(event)
    except Exception as error:
        return seen, error
    return seen, None


def results(client: Any, session_id: str) -> list[ToolMessage]:
    return [m for m in client.agent.history.load(session_id) if isinstance(m, ToolMessage)]


# requests -----------------------------------------------------------------------


@pytest.mark.parametrize("allowed", [1, 2, 3])
async def test_requests_limit_allows_n_model_calls_and_refuses_the_next(allowed: int) -> None:
    ledger: list[str] = []
    model = ScriptedModel([calls(1), calls(2), calls(3), calls(4)])
    client = await create_agent(model, tools=[ledger_tool(ledger)], usage_limits=UsageLimits(requests=allowed))
    with pytest.raises(UsageLimitExceeded) as raised:
        await client.run("go", config=AgentRunConfig(session_id="s"))
    assert raised.value.limit == "requests"
    assert raised.value.allowed == allowed
    assert len(model.requests) == allowed  # N made, the N+1st never
    assert raised.value.usage.requests == allowed
    assert ledger == [f"work:{n}" for n in range(1, allowed + 1)]
    assert client.transitions("s", region="phase")[-1].trigger == "limit_reached"


async def test_requests_limit_at_exactly_the_calls_needed_lets_the_request_finish() -> None:
    model = ScriptedModel([calls(1), AssistantMessage("finished")])
    client = await create_agent(model, tools=[ledger_tool([])], usage_limits=UsageLimits(requests=2))
    answer = await client.run("go")
    assert answer.content == "finished"


# tool calls ---------------------------------------------------------------------


@pytest.mark.parametrize("allowed", [0, 1, 3])
async def test_tool_calls_limit_holds_inside_one_message_with_many_calls(allowed: int) -> None:
    ledger: list[str] = []
    model = ScriptedModel([calls(1, 2, 3, 4, 5), AssistantMessage("never")])
    client = await create_agent(model, tools=[ledger_tool(ledger)], usage_limits=UsageLimits(tool_calls=allowed))
    seen, error = await _collect(client, "go", AgentRunConfig(session_id="s"))
    assert isinstance(error, UsageLimitExceeded)
    assert error.limit == "tool_calls" and error.usage.tool_calls == allowed
    assert len(ledger) == allowed  # exactly N ran; the N+1st and later did not
    found = results(client, "s")
    assert [m.tool_call_id for m in found] == ["c1", "c2", "c3", "c4", "c5"]  # every call has its one result
    for message in found[allowed:]:
        assert message.status is ToolStatus.FAILED
        assert message.text == f"not run: the request reached its usage limit tool_calls={allowed}"
    assert len(model.requests) == 1
    assert ("awaiting_tool", "call_over_limit", "awaiting_tool") in phases(seen)
    assert phases(seen)[-1] == ("turn_settled", "limit_reached", "failed")
    reached = [e for e in seen if isinstance(e, UsageLimitReachedEvent)]
    assert [(e.limit, e.on_exhausted) for e in reached] == [("tool_calls", "fail")]


async def test_per_tool_cap_refuses_that_tool_only_and_the_request_goes_on() -> None:
    ledger: list[str] = []
    model = ScriptedModel([asks(call("a1", "search", n=1), call("a2", "search", n=2), call("b1", "work", n=3)),
                           AssistantMessage("done")])
    client = await create_agent(
        model,
        tools=[ledger_tool(ledger, "search"), ledger_tool(ledger, "work")],
        usage_limits=UsageLimits(per_tool={"search": 1}),
    )
    answer = await client.run("go", config=AgentRunConfig(session_id="s"))
    assert answer.content == "done"
    assert sorted(ledger) == ["search:1", "work:3"]
    refused = {m.tool_call_id: m.text for m in results(client, "s") if m.status is ToolStatus.FAILED}
    assert refused == {"a2": "not run: the request reached its usage limit per_tool['search']=1"}
    usage = client.usage("s")
    assert usage is not None and dict(usage.per_tool) == {"search": 1, "work": 1} and usage.tool_calls == 2


# tokens -------------------------------------------------------------------------


def spent(message: AssistantMessage, tokens_in: int, tokens_out: int) -> ResponseCompletedEvent:
    return ResponseCompletedEvent(message, Usage(tokens_in, tokens_out))


@pytest.mark.parametrize(
    ("limits", "name"),
    [
        (UsageLimits(input_tokens=20), "input_tokens"),
        (UsageLimits(output_tokens=10), "output_tokens"),
        (UsageLimits(total_tokens=30), "total_tokens"),
    ],
)
async def test_token_limits_stop_the_request_once_reached(limits: UsageLimits, name: str) -> None:
    # Each call spends 10 in and 5 out: two calls spend exactly 20 in, 10 out, 30 in all.
    ledger: list[str] = []
    model = ScriptedModel([spent(calls(1), 10, 5), spent(calls(2), 10, 5), spent(calls(3), 10, 5)])
    client = await create_agent(model, tools=[ledger_tool(ledger)], usage_limits=limits)
    with pytest.raises(UsageLimitExceeded) as raised:
        await client.run("go", config=AgentRunConfig(session_id="s"))
    assert raised.value.limit == name
    # The first call (below the limit) ran its tool; the second reached the limit, so its call did not run.
    assert len(model.requests) == 2
    assert ledger == ["work:1"]
    last = results(client, "s")[-1]
    assert last.status is ToolStatus.FAILED and last.text.startswith(f"not run: the request reached its usage limit {name}=")
    assert raised.value.usage.input_tokens == 20 and raised.value.usage.output_tokens == 10


async def test_token_limit_one_above_what_was_spent_allows_the_next_call() -> None:
    model = ScriptedModel([spent(calls(1), 10, 5), spent(AssistantMessage("ok"), 10, 5)])
    client = await create_agent(model, tools=[ledger_tool([])], usage_limits=UsageLimits(total_tokens=16))
    assert (await client.run("go")).content == "ok"


# wrap-up ------------------------------------------------------------------------


async def test_wrap_up_makes_one_last_call_offering_no_tools_and_ends_with_its_answer() -> None:
    ledger: list[str] = []
    model = ScriptedModel([calls(1), AssistantMessage("partial answer: did 1 of 2")])
    client = await create_agent(
        model, tools=[ledger_tool(ledger)], usage_limits=UsageLimits(requests=1, on_exhausted="wrap_up")
    )
    seen, error = await _collect(client, "go", AgentRunConfig(session_id="s"))
    assert error is None
    assert ledger == ["work:1"]
    assert len(model.requests) == 2
    wrap_up = model.requests[1]
    assert wrap_up.tools == () and wrap_up.server_tools == ()
    assert isinstance(wrap_up.messages[-1], SystemMessage) and "budget" in wrap_up.messages[-1].content
    assert model.requests[0].tools != ()
    assert ("turn_settled", "wrap_up", "awaiting_model") in phases(seen)
    assert phases(seen)[-1] == ("concluding", "complete", "completed")
    history = client.agent.history.load("s")
    assert history[-1] == AssistantMessage("partial answer: did 1 of 2")
    assert not any(isinstance(m, SystemMessage) for m in history)  # the note is the wrap-up request's only


async def test_the_wrap_up_call_sets_tool_choice_none_whatever_the_agent_asks() -> None:
    model = ScriptedModel([calls(1), AssistantMessage("done as far as the budget went")])
    client = await create_agent(
        model,
        tools=[ledger_tool([])],
        usage_limits=UsageLimits(requests=1, on_exhausted="wrap_up"),
        model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False),
    )
    await client.run("go", config=AgentRunConfig(session_id="s"))
    assert model.requests[0].settings.tool_choice == "required"
    wrap_up = model.requests[1]
    assert wrap_up.tools == ()
    assert wrap_up.settings.tool_choice == "none" and wrap_up.settings.parallel_tool_calls is None


async def test_tool_calls_in_the_wrap_up_answer_are_refused_and_the_request_fails() -> None:
    ledger: list[str] = []
    model = ScriptedModel([calls(1), calls(2), calls(3)])  # the third is the wrap-up call's answer
    client = await create_agent(
        model, tools=[ledger_tool(ledger)], usage_limits=UsageLimits(tool_calls=1, on_exhausted="wrap_up")
    )
    seen, error = await _collect(client, "go", AgentRunConfig(session_id="s"))
    assert isinstance(error, UsageLimitExceeded) and error.limit == "tool_calls"
    assert ledger == ["work:1"]
    assert model.requests[2].tools == ()
    assert [m.status for m in results(client, "s")] == [ToolStatus.SUCCEEDED, ToolStatus.FAILED, ToolStatus.FAILED]
    assert phases(seen)[-1] == ("turn_settled", "limit_reached", "failed")


async def test_wrap_up_at_the_first_request_when_nothing_may_be_spent() -> None:
    model = ScriptedModel([AssistantMessage("no budget, so briefly: hello")])
    client = await create_agent(model, usage_limits=UsageLimits(requests=0, on_exhausted="wrap_up"))
    assert (await client.run("hi", config=AgentRunConfig(session_id="s"))).content.startswith("no budget")
    assert ("setup", "wrap_up", "awaiting_model") in [(s.source, s.trigger, s.dest) for s in client.transitions("s")]


async def test_limits_fail_at_setup_when_nothing_may_be_spent() -> None:
    model = ScriptedModel([AssistantMessage("never")])
    client = await create_agent(model, usage_limits=UsageLimits(requests=0))
    with pytest.raises(UsageLimitExceeded):
        await client.run("hi", config=AgentRunConfig(session_id="s"))
    assert model.requests == []
    last = client.transitions("s", region="phase")[-1]
    assert (last.source, last.trigger, last.dest) == ("setup", "limit_reached", "failed")


# per run, usage ---------------------------------------------------------------


async def test_a_runs_limits_replace_the_agents() -> None:
    model = ScriptedModel([calls(1), calls(2), AssistantMessage("done")])
    client = await create_agent(model, tools=[ledger_tool([])], usage_limits=UsageLimits(requests=1))
    answer = await client.run("go", config=AgentRunConfig(session_id="s", usage_limits=UsageLimits(requests=3)))
    assert answer.content == "done"


async def test_usage_per_model_call_per_tool_and_in_total() -> None:
    model = ScriptedModel([spent(calls(1, 2), 7, 3), spent(AssistantMessage("ok"), 11, 2)])
    client = await create_agent(model, tools=[ledger_tool([])], usage_limits=UsageLimits())
    await client.run("go", config=AgentRunConfig(session_id="s"))
    usage = client.usage("s")
    assert usage is not None
    assert usage.model_calls == (Usage(7, 3), Usage(11, 2))
    assert (usage.requests, usage.input_tokens, usage.output_tokens, usage.total_tokens) == (2, 18, 5, 23)
    assert dict(usage.per_tool) == {"work": 2}


async def test_no_limits_no_usage_counted() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("ok")]))
    await client.run("go", config=AgentRunConfig(session_id="s"))
    assert client.usage("s") is None


# bad input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "kind", "message"),
    [
        (lambda: UsageLimits(requests=-1), ValueError, "UsageLimits.requests must be at least 0, got -1"),
        (lambda: UsageLimits(total_tokens=1.5), TypeError, "UsageLimits.total_tokens must be an int or None, got float"),
        (lambda: UsageLimits(tool_calls=True), TypeError, "UsageLimits.tool_calls must be an int or None, got bool"),
        (lambda: UsageLimits(per_tool={"x": -2}), ValueError, "UsageLimits.per_tool['x'] must be at least 0, got -2"),
        (lambda: UsageLimits(on_exhausted="stop"), ValueError, "UsageLimits.on_exhausted must be 'fail' or 'wrap_up'"),
        (lambda: AgentRunConfig(deadline=0), ValueError, "AgentRunConfig.deadline must be more than 0, got 0"),
        (lambda: AgentRunConfig(usage_limits={"requests": 1}), TypeError, "must be a UsageLimits or None, got dict"),
        (lambda: tool(timeout=-1)(lambda: None), ValueError, "ToolDefinition.timeout must be more than 0, got -1"),
        (lambda: tool(timeout=float("nan"))(lambda: None), ValueError, "ToolDefinition.timeout must be finite"),
    ],
)
def test_bad_limits_are_refused_at_construction(make: Any, kind: type[Exception], message: str) -> None:
    with pytest.raises(kind) as raised:
        make()
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"tool_timeout": 0}, "Agent.tool_timeout must be more than 0, got 0"),
        ({"usage_limits": 3}, "Agent.usage_limits must be a UsageLimits or None, got int"),
    ],
)
async def test_bad_agent_bounds_are_refused_at_construction(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError)) as raised:
        await create_agent(ScriptedModel([]), **arguments)
    assert message in str(raised.value)


# subagents --------------------------------------------------------------------


async def _parent_with_child(limits: UsageLimits) -> tuple[Any, ScriptedModel]:
    from orchestrator import SubAgentExtension

    child_model = ScriptedModel([spent(AssistantMessage("found it"), 100, 50)])
    child = await create_agent(child_model)
    parent_model = ScriptedModel(
        [spent(asks(call("r1", "research", task="dig")), 10, 5), spent(calls(1), 10, 5), spent(AssistantMessage("ok"), 10, 5)]
    )
    parent = await create_agent(
        parent_model,
        tools=[ledger_tool([])],
        extensions=[SubAgentExtension(child, name="research", description="Digs.")],
        usage_limits=limits,
    )
    return parent, parent_model


async def test_a_subagents_usage_is_reported_apart_and_not_counted_by_default() -> None:
    parent, _ = await _parent_with_child(UsageLimits(total_tokens=40))
    assert (await parent.run("go", config=AgentRunConfig(session_id="s"))).content == "ok"
    usage = parent.usage("s")
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (30, 15)
    assert usage.subagents == Usage(100, 50)


async def test_a_subagents_usage_counts_against_the_parent_with_count_subagents() -> None:
    parent, parent_model = await _parent_with_child(UsageLimits(total_tokens=40, count_subagents=True))
    with pytest.raises(UsageLimitExceeded) as raised:
        await parent.run("go", config=AgentRunConfig(session_id="s"))
    assert raised.value.limit == "total_tokens"
    assert len(parent_model.requests) == 1  # the child spent 150 tokens: no second parent call
    assert raised.value.usage.subagents == Usage(100, 50)


async def test_a_call_over_the_limit_beside_a_call_waiting_for_approval_is_refused_there() -> None:
    # Which of two concurrent calls runs first is the scheduler's choice: run until the refusal
    # has been seen while the other call waits for its approval (each run: one chance in two).
    from orchestrator.extensions.tool_approval import ToolApprovalExtension

    sources: set[str] = set()
    for attempt in range(40):
        ledger: list[str] = []
        approvals = ToolApprovalExtension({"deploy": "ask"}, expires_after=0.01)
        model = ScriptedModel([asks(call("c1", "deploy", n=1), call("c2", "work", n=2)), AssistantMessage("done")])
        client = await create_agent(
            model,
            tools=[ledger_tool(ledger, "deploy"), ledger_tool(ledger)],
            extensions=[approvals],
            usage_limits=UsageLimits(per_tool={"work": 0}),
        )
        seen, error = await _collect(client, "go", AgentRunConfig(session_id=f"s{attempt}"))
        assert error is None and ledger == []
        sources |= {source for source, trigger, _ in phases(seen) if trigger == "call_over_limit"}
        if "awaiting_approval" in sources:
            break
    assert "awaiting_approval" in sources

"""An agent serving many sessions keeps the path and usage of the latest ended requests only (a running request always
answers): what it remembers does not grow with every session it ever ran."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from support import asks, call

import orchestrator.agent
from orchestrator import AgentRunConfig, AssistantMessage, ExternalEvent, ScriptedModel, UsageLimits, create_agent
from orchestrator.extensions.ask_user import AskUserExtension

KEPT = 5
EXTRA = 3


def phase_dests(client, session_id: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [step.dest for step in client.transitions(session_id, region="phase")]


async def test_only_the_latest_ended_sessions_are_kept_and_a_waiting_one_always_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # raising=False: the bound is what is under test, not the constant's name
    monkeypatch.setattr(orchestrator.agent, "RECENT_SESSIONS", KEPT, raising=False)
    question = call("q1", "ask_user", question="Go on?", options=["yes", "no"])
    model = ScriptedModel([asks(question), AssistantMessage("ok")], repeat_last=True)
    client = await create_agent(model, extensions=[AskUserExtension()], usage_limits=UsageLimits())
    with trio.fail_after(10):
        parked = await client.start("deploy?", config=AgentRunConfig("parked"))
        await trio.testing.wait_all_tasks_blocked()
        assert parked.state == "awaiting_approval"

        ended = [f"s{i}" for i in range(KEPT + EXTRA)]
        for session_id in ended:
            answer = await client.run("hi", config=AgentRunConfig(session_id))
            assert answer.content == "ok"

        # the oldest ended sessions are forgotten: no path, no usage
        for session_id in ended[:EXTRA]:
            assert client.transitions(session_id) == []
            assert client.usage(session_id) is None
        # the latest ones answer for their request
        for session_id in ended[EXTRA:]:
            assert phase_dests(client, session_id)[-1] == "completed"
            usage = client.usage(session_id)
            assert usage is not None and usage.requests == 1
        assert len(client.agent._recent) == KEPT

        # the waiting request answers however many sessions ended since it started
        assert client.state("parked") == "awaiting_approval"
        assert phase_dests(client, "parked")[-1] == "awaiting_approval"
        waiting_usage = client.usage("parked")
        assert waiting_usage is not None and waiting_usage.requests == 1

        taken = client.agent.emit_external_event(
            ExternalEvent("ask_user_response", {"tool_call_id": "q1", "answer": "yes"}),
            config=AgentRunConfig("parked"),
        )
        assert taken == ["AskUserExtension"]
        assert (await parked.result()).content == "ok"

    # once ended it is the most recent: kept, and the oldest kept session makes room for it
    assert client.state("parked") is None
    assert phase_dests(client, "parked")[-1] == "completed"
    parked_usage = client.usage("parked")
    assert parked_usage is not None and parked_usage.requests == 2
    assert client.transitions(ended[EXTRA]) == [] and client.usage(ended[EXTRA]) is None
    assert phase_dests(client, ended[EXTRA + 1])[-1] == "completed"
    assert len(client.agent._recent) == KEPT


async def test_a_session_that_runs_again_is_kept_as_the_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orchestrator.agent, "RECENT_SESSIONS", KEPT, raising=False)
    client = await create_agent(ScriptedModel([AssistantMessage("ok")], repeat_last=True), usage_limits=UsageLimits())
    with trio.fail_after(10):
        for i in range(KEPT):
            await client.run("hi", config=AgentRunConfig(f"s{i}"))
        await client.run("again", config=AgentRunConfig("s0"))  # s0 ends last now; s1 is the oldest
        await client.run("hi", config=AgentRunConfig("new"))
    assert client.transitions("s1") == [] and client.usage("s1") is None
    for session_id in ("s0", "s2", "s3", "s4", "new"):
        assert phase_dests(client, session_id)[-1] == "completed"
        assert client.usage(session_id) is not None
    assert await client.delete_session("s0") is True
    assert client.transitions("s0") == [] and client.usage("s0") is None

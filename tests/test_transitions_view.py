"""``transitions()``: each edge names its machine and region, and one region is one call."""

from __future__ import annotations

from orchestrator import AgentRunConfig, AssistantMessage, ScriptedModel, ToolCall, create_agent, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _client_after_one_tool_turn():  # type: ignore[no-untyped-def]
    model = ScriptedModel([AssistantMessage("", [ToolCall("c1", "add", {"a": 2, "b": 3})]), AssistantMessage("5")])
    client = await create_agent(model, tools=[add])
    await client.run("2 + 3?", config=AgentRunConfig(session_id="s1"))
    return client


async def test_every_edge_names_its_machine_and_region_and_the_mode_region_is_not_in_the_phase_path() -> None:
    client = await _client_after_one_tool_turn()
    everything = client.transitions("s1")
    assert {(s.machine, s.region) for s in everything} == {("request", "phase"), ("request", "mode")}
    assert str(everything[0]) == "request.phase: idle -start-> setup"
    phase = client.transitions("s1", region="phase")
    assert [s.dest for s in phase] == [
        "setup", "awaiting_model", "awaiting_tool", "turn_settled", "awaiting_model", "answered", "concluding",
        "completed",
    ]
    assert [str(s) for s in client.transitions("s1", region="mode")] == ["request.mode: normal -admit_tool-> normal"]
    assert client.transitions("s1", machine="request") == everything
    assert client.transitions("s1", machine="tool_approval") == []


async def test_a_run_handle_gives_one_region_in_one_call() -> None:
    model = ScriptedModel([AssistantMessage("", [ToolCall("c1", "add", {"a": 1, "b": 1})]), AssistantMessage("2")])
    client = await create_agent(model, tools=[add])
    handle = await client.start("1 + 1?", config=AgentRunConfig(session_id="s2"))
    await handle.result()
    assert handle.steps(region="phase") == [s for s in handle.transitions if s.region == "phase"]
    assert [s.trigger for s in handle.steps(region="mode")] == ["admit_tool"]

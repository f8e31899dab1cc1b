"""Failing hooks of concurrently running tool calls give one plain error, as one failure does."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from orchestrator import AgentRunConfig, AssistantMessage, ScriptedModel, ToolCall, create_agent, tool
from orchestrator.extensions.base import AgentExtension
from orchestrator.tools import ToolResult


class HookFailed(Exception):
    pass


@tool
async def work(n: int) -> str:
    """Some work."""
    await trio.sleep(0)
    return str(n)


class FailingHooks(AgentExtension):
    """Fails the hook ``where`` of each call in ``failing``, once all of them got there (so all do fail)."""

    def __init__(self, where: str, failing: set[str]) -> None:
        self.where = where
        self.failing = failing
        self.arrived: set[str] = set()
        self.all_arrived = trio.Event()
        self.errors: list[BaseException] = []

    async def _fail_together(self, call: ToolCall, message: str) -> None:
        self.arrived.add(call.id)
        if self.arrived == self.failing:
            self.all_arrived.set()
        with trio.CancelScope(shield=True):
            await self.all_arrived.wait()
        raise HookFailed(message)

    async def before_tool(self, context: Any, call: ToolCall) -> None:
        if self.where == "before" and call.id in self.failing:
            await self._fail_together(call, f"before_tool refused {call.id}")

    async def after_tool(self, context: Any, call: ToolCall, result: ToolResult, error: Any) -> None:
        if self.where == "after" and call.id in self.failing:
            await self._fail_together(call, f"after_tool broke on {call.id}")

    async def on_error(self, context: Any, error: BaseException) -> None:
        self.errors.append(error)


def calls(*ids: str) -> ScriptedModel:
    return ScriptedModel([AssistantMessage("", [ToolCall(i, "work", {"n": 1}) for i in ids]), AssistantMessage("ok")])


@pytest.mark.parametrize("where", ["before", "after"])
async def test_two_failing_hooks_raise_the_first_error_with_the_other_in_a_note(where: str) -> None:
    hooks = FailingHooks(where, {"a", "b"})
    client = await create_agent(calls("a", "b", "c"), tools=[work], extensions=[hooks])
    failed: list[BaseException] = []
    with trio.fail_after(10), pytest.raises(HookFailed) as raised:
        async for event in client.stream("go", config=AgentRunConfig("s")):
            if event.name == "run_failed":
                failed.append(event.payload["error"])
    error = raised.value
    assert not isinstance(error, BaseExceptionGroup)
    assert hooks.errors == [error] and failed == [error]
    verb = "refused" if where == "before" else "broke on"
    first = str(error).rsplit(" ", 1)[1]
    [second] = {"a", "b"} - {first}
    assert str(error) == f"{where}_tool {verb} {first}"
    assert error.__notes__ == [f"a concurrent tool call also failed: HookFailed: {where}_tool {verb} {second}"]


async def test_one_failing_hook_among_concurrent_calls_raises_the_same_shape_without_notes() -> None:
    hooks = FailingHooks("after", {"b"})
    client = await create_agent(calls("a", "b"), tools=[work], extensions=[hooks])
    with trio.fail_after(10), pytest.raises(HookFailed) as raised:
        await client.run("go")
    assert not getattr(raised.value, "__notes__", None)
    assert hooks.errors == [raised.value]

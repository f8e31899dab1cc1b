"""client.pending(): every call waiting for an external answer, live or stored by an earlier process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing
from support import asks, call

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    ScriptedModel,
    ToolCall,
    create_agent,
)
from orchestrator.events import ExtensionEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.runtime.pending import PendingCall, ResponseRouter
from orchestrator.store import PendingApproval
from orchestrator.tools import ToolDefinition, build_tool


def answer(tool_call_id: str, value: str) -> ExternalEvent:
    return ExternalEvent("ask_user_response", {"tool_call_id": tool_call_id, "answer": value})


async def test_parallel_ask_user_calls_are_listed_until_each_is_answered() -> None:
    questions = asks(
        call("a", "ask_user", question="Name?", options=[]),
        call("b", "ask_user", question="Colour?", options=["red", "blue"]),
    )
    client = await create_agent(ScriptedModel([questions, AssistantMessage("thanks")]), extensions=[AskUserExtension()])
    handle = await client.start("form", config=AgentRunConfig("s1", request_id="r1"))
    assert client.pending() == []
    with trio.fail_after(5):
        asked = 0
        async for event in handle.events():
            asked += event.name == "ask_user"
            if asked == 2:
                break
        assert sorted(client.pending(), key=lambda p: p.tool_call_id) == [
            PendingCall(
                "s1",
                "r1",
                "a",
                "ask_user",
                {"tool_call_id": "a", "question": "Name?", "options": [], "response_event": "ask_user_response"},
                "ask_user_response",
            ),
            PendingCall(
                "s1",
                "r1",
                "b",
                "ask_user",
                {
                    "tool_call_id": "b",
                    "question": "Colour?",
                    "options": ["red", "blue"],
                    "response_event": "ask_user_response",
                },
                "ask_user_response",
            ),
        ]
        # parallel calls start in either order; the listing keeps the order they began waiting
        assert client.pending("s1") == client.pending() and client.pending("other") == []
        assert client.agent.emit_external_event(answer("b", "red"), config=AgentRunConfig("s1"))
        assert [p.tool_call_id for p in client.pending()] == ["a"]
        assert client.agent.emit_external_event(answer("a", "Ada"), config=AgentRunConfig("s1"))
        assert client.pending() == []
        await handle.result()
    assert client.pending() == []


async def test_plan_mode_approval_is_listed_and_answerable_from_the_listing(tmp_path: Path) -> None:
    model = ScriptedModel([asks(call("p1", "enter_plan_mode", reason="big change")), AssistantMessage("ok")])
    client = await create_agent(model, extensions=[PlanModeExtension(root=tmp_path)])
    handle = await client.start("refactor", config=AgentRunConfig("s"))
    with trio.fail_after(5):
        async for event in handle.events():
            if event.name == "enter_plan_mode":
                break
        [waiting] = client.pending()
        assert (waiting.event, waiting.response_event, waiting.payload["reason"]) == (
            "enter_plan_mode",
            "enter_plan_mode_response",
            "big change",
        )
        reply = ExternalEvent(waiting.response_event, {"tool_call_id": waiting.tool_call_id, "approved": True})
        assert client.agent.emit_external_event(reply, config=AgentRunConfig(waiting.session_id))
        await handle.result()
    assert client.pending() == []


class DeployGate(AgentExtension):
    """An extension of the application's own, built on ResponseRouter."""

    def __init__(self) -> None:
        self.router = ResponseRouter()
        router = self.router

        async def deploy(context: AgentRunContext, call: ToolCall, target: str) -> str:
            """Deploy after a human says so.

            Args:
                target: where to
            """
            announce = ExtensionEvent(name="deploy_requested", payload={"tool_call_id": call.id, "target": target})
            reply = await router.wait(context, call.id, response_event="deploy_decision", announce=announce)
            return "deployed" if reply.get("go") else "held"

        self.tool: ToolDefinition = build_tool(deploy)

    async def on_tool(self, context: AgentRunContext) -> None:
        context.register_tool(self.tool)

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        return event.name == "deploy_decision" and self.router.accept(config, event)


async def test_any_response_router_user_is_listed() -> None:
    model = ScriptedModel([asks(call("d1", "deploy", target="prod")), AssistantMessage("ok")])
    client = await create_agent(model, extensions=[DeployGate()])
    handle = await client.start("ship", config=AgentRunConfig("s", request_id="r"))
    with trio.fail_after(5):
        async for event in handle.events():
            if event.name == "deploy_requested":
                break
        assert client.pending() == [
            PendingCall("s", "r", "d1", "deploy_requested", {"tool_call_id": "d1", "target": "prod"}, "deploy_decision")
        ]
        decision = ExternalEvent("deploy_decision", {"tool_call_id": "d1", "go": True})
        assert client.agent.emit_external_event(decision, config=AgentRunConfig("s"))
        await handle.result()
    assert client.pending() == []


async def test_waits_stored_by_an_earlier_process_are_listed_too(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    question = asks(call("q1", "ask_user", question="Proceed?", options=["yes", "no"]))
    earlier = await create_agent(
        ScriptedModel([question]), history=None, extensions=[SQLiteSessionStore(db), AskUserExtension()]
    )
    old = await earlier.start("work", config=AgentRunConfig("old", request_id="r-old"))
    with trio.fail_after(5):
        async for event in old.events():
            if event.name == "ask_user":
                break
        # Another process (its own agent and store on the same file) runs no request of that session.
        later_store = SQLiteSessionStore(db)
        later = await create_agent(
            ScriptedModel([AssistantMessage("resumed")]), history=None, extensions=[later_store, AskUserExtension()]
        )
        [stored] = later.pending()
        assert stored == PendingCall(
            "old",
            "r-old",
            "q1",
            "ask_user",
            {
                "tool_call_id": "q1",
                "question": "Proceed?",
                "options": ["yes", "no"],
                "response_event": "ask_user_response",
            },
            "ask_user_response",
            live=False,
        )
        assert later.pending("other") == []
        [live] = earlier.pending()  # the process running it lists its own wait once, as live
        assert live.live and live.tool_call_id == "q1"
        # The earlier process still runs the session: it takes its answers itself, the later one refuses.
        assert later.agent.emit_external_event(answer("q1", "yes"), config=AgentRunConfig("old")) == []
        assert [c.tool_call_id for c in later.pending()] == ["q1"]
        old.cancel()
        await old.wait()
    # A wait whose process stopped, answered into the store, no longer waits for an answer.
    later_store.store.record_wait(
        PendingApproval("gone", "r-gone", "q2", "ask_user", "ask_user_response", {"options": []}, None, 0.0)
    )
    assert [c.tool_call_id for c in later.pending()] == ["q2"]
    assert later.agent.emit_external_event(answer("q2", "yes"), config=AgentRunConfig("gone"))
    assert later.pending() == []


async def test_a_wait_without_a_question_event_is_listed_with_an_empty_one() -> None:
    router = ResponseRouter()

    class Silent(AgentExtension):
        async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
            await router.wait(context, call.id, response_event="go_ahead")

    def noop() -> str:
        """Nothing."""
        return "done"

    client = await create_agent(
        ScriptedModel([asks(call("n1", "noop")), AssistantMessage("ok")]),
        tools=[build_tool(noop)],
        extensions=[Silent()],
    )
    handle = await client.start("x", config=AgentRunConfig("s", request_id="r"))
    with trio.fail_after(5):
        await trio.testing.wait_all_tasks_blocked()
        assert client.pending() == [PendingCall("s", "r", "n1", "", {}, "go_ahead")]
        reply: dict[str, Any] = {"tool_call_id": "n1"}
        assert router.accept(AgentRunConfig("s"), ExternalEvent("go_ahead", reply))
        await handle.result()
    assert client.pending() == []

"""``open_durable_agent``: one process that keeps its runs in a run store and carries them itself.

An answer posted while the run is parked resumes it in the process that holds the store, on SQLite and
on PostgreSQL; leaving the block by an exception (raised as itself) or a cancellation hands a running run
back at once, so the next open resumes it without waiting for its lease; steering and cancel go through
the store; an agent that keeps its sessions in a session store, or that is carried already, is refused,
saying why; a run of a process of this machine that was killed is taken over at once, not after its lease.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolCall, ToolMessage, create_agent, tool
from orchestrator.agent import AgentClient
from orchestrator.cluster import DurableAgent, open_durable_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.runtime.handle import UnknownRun
from tests.cluster.painting import paint_then_report

CUT_OFF = "may or may not have taken effect"


def asking(request: ModelRequest) -> AssistantMessage:
    """Asks which colour, then says the answer it got."""
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    if not results:
        return AssistantMessage("", (ToolCall("q1", "ask_user", {"question": "Colour?", "options": ["red", "blue"]}),))
    return AssistantMessage(f"Painted {results[-1].text}.")


async def asking_agent() -> AgentClient:
    return await create_agent(ScriptedModel([asking], repeat_last=True), extensions=[AskUserExtension()])


async def until_status(runs: DurableAgent, request_id: str, status: str) -> None:
    while (await runs.run(request_id)).status != status:
        await trio.sleep(0.02)


async def answered_after_parking(where: str) -> None:
    with trio.fail_after(30):
        async with open_durable_agent(await asking_agent(), where) as runs:
            request_id = await runs.start("s1", "paint the door")
            await until_status(runs, request_id, "parked")
            waiting = await runs.pending("s1")
            assert [(call["tool_call_id"], call["live"]) for call in waiting] == [("q1", False)]
            refused = await runs.answer("s1", "ask_user_response", {"tool_call_id": "q1", "answer": "green"})
            assert not refused and "must be one of" in refused.reason
            taken = await runs.answer("s1", "ask_user_response", {"tool_call_id": "q1", "answer": "blue"})
            assert taken, taken.reason
            names = [event.name async for event in runs.events(request_id)]
            assert names[-1] == "run_completed" and names.count("ask_user") == 1
            result = await runs.result(request_id)
            assert result is not None and result.content == "Painted blue."
            assert [m.role for m in await runs.history("s1")] == ["user", "assistant", "tool", "assistant"]


async def test_an_answer_to_a_parked_run_resumes_it_on_sqlite(tmp_path: Path) -> None:
    await answered_after_parking(str(tmp_path / "app.db"))


async def test_an_answer_to_a_parked_run_resumes_it_on_postgresql(postgres_dsn: str) -> None:
    await answered_after_parking(postgres_dsn)


@pytest.mark.parametrize("leaving", ["exception", "cancellation"])
async def test_leaving_by_an_exception_hands_a_running_run_back_at_once(tmp_path: Path, leaving: str) -> None:
    path = tmp_path / "app.db"
    entered = trio.Event()

    @tool
    async def slow_paint(colour: str) -> str:
        """Paint, slowly.

        Args:
            colour: the colour
        """
        entered.set()
        await trio.sleep(3600)
        return f"painted {colour}"

    async def painter() -> AgentClient:
        return await create_agent(ScriptedModel([paint_then_report], repeat_last=True), tools=[slow_paint])

    class Stop(Exception):
        pass

    with trio.fail_after(30):
        raised = pytest.raises(Stop) if leaving == "exception" else contextlib.nullcontext()
        with trio.CancelScope() as outer, raised:
            async with open_durable_agent(await painter(), path, lease_seconds=600) as runs:
                request_id = await runs.start("s1", "paint")
                await entered.wait()
                if leaving == "exception":
                    raise Stop
                outer.cancel()
                await trio.sleep(3600)
        assert outer.cancelled_caught == (leaving == "cancellation")
        # A lease of 600 s: only a hand-back lets the next open resume the run within this test's 30 s.
        async with open_durable_agent(await painter(), path, lease_seconds=600) as runs:
            async for _ in runs.events(request_id):
                pass
            result = await runs.result(request_id)
    assert result is not None and CUT_OFF in str(result.content)  # the call cut off is said so, not run again


async def test_steering_and_cancel_go_through_the_store(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_durable_agent(await asking_agent(), tmp_path / "app.db") as runs:
            request_id = await runs.start("s1", "paint the door")
            await until_status(runs, request_id, "parked")
            assert await runs.steer("s1", "blue would be nice")
            assert not await runs.steer("s1", "  ")
            assert await runs.cancel(request_id)
            names = [event.name async for event in runs.events(request_id)]
            assert names[-1] == "run_cancelled"
            assert (await runs.run(request_id)).status == "cancelled"
            assert not await runs.cancel(request_id)  # it had ended
            with pytest.raises(UnknownRun):
                await runs.run("no-such-run")


async def test_an_agent_with_a_session_store_is_refused(tmp_path: Path) -> None:
    store = SQLiteSessionStore(str(tmp_path / "sessions.db"))
    agent = await create_agent(ScriptedModel([AssistantMessage("hi")]), history=None, extensions=[store])
    with pytest.raises(ValueError, match="SessionStoreExtension"):
        async with open_durable_agent(agent, tmp_path / "app.db"):
            pass


async def test_an_agent_is_carried_by_one_open_at_a_time(tmp_path: Path) -> None:
    agent = await asking_agent()
    with trio.fail_after(30):
        async with open_durable_agent(agent, tmp_path / "app.db"):
            with pytest.raises(ValueError, match="carries runs of a store already"):
                async with open_durable_agent(agent, tmp_path / "other.db"):
                    pass


KILLED_CHILD = """
import sys

import trio

from orchestrator import AssistantMessage, ScriptedModel, ToolCall, create_agent, tool
from orchestrator.cluster import open_durable_agent


@tool
async def slow_paint(colour: str) -> str:
    '''Paint, slowly.

    Args:
        colour: the colour
    '''
    print("painting", flush=True)
    await trio.sleep(3600)
    return f"painted {colour}"


async def main() -> None:
    model = ScriptedModel([AssistantMessage("", (ToolCall("p1", "slow_paint", {"colour": "red"}),))])
    agent = await create_agent(model, tools=[slow_paint])
    async with open_durable_agent(agent, sys.argv[1], lease_seconds=600) as runs:
        await runs.start("s1", "paint", request_id="r1")
        await trio.sleep_forever()


trio.run(main)
"""


async def test_a_run_of_a_killed_process_of_this_machine_is_taken_over_at_once(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert child.stdout is not None
        line = await trio.to_thread.run_sync(child.stdout.readline)
        assert line.strip() == b"painting", child.stderr.read() if child.stderr else ""
    finally:
        child.kill()
        child.wait(30)

    @tool
    async def slow_paint(colour: str) -> str:
        """Paint, slowly.

        Args:
            colour: the colour
        """
        raise AssertionError("a call cut off is not run again")

    model = ScriptedModel([AssistantMessage("Told them.")])
    agent = await create_agent(model, tools=[slow_paint])
    with trio.fail_after(30):  # its lease has 600 s left: only a take-over resumes it within the test
        async with open_durable_agent(agent, path, lease_seconds=600) as runs:
            names = [event.name async for event in runs.events("r1")]
            result = await runs.result("r1")
            history = await runs.history("s1")
    assert names[-1] == "run_completed" and "run_resumed" in names
    assert result is not None and result.content == "Told them."
    assert CUT_OFF in next(m for m in history if isinstance(m, ToolMessage)).text

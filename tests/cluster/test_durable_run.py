"""DurableRun against a real (SQLite) run store: what it records when lookups and commits interleave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.cluster.durable import DurableExtension, DurableRun
from orchestrator.events import MessageAppendedEvent
from orchestrator.messages import ToolMessage
from orchestrator.store.runs import NewInboxItem
from orchestrator.store.runs_sql import SQLRunStore, sqlite_run_store
from tests.cluster.waits import until_final


class _Context:
    """What ``DurableExtension.on_event`` reads of a run's context: its request and its machines' states."""

    def __init__(self, phase: str) -> None:
        self.request_id = "r1"
        self.states = {"phase": phase}


def _listened(durable: DurableRun) -> DurableExtension:
    extension = DurableExtension()
    extension.attach(durable)
    return extension


async def _carried_to_its_end(client: Any, path: str) -> SQLRunStore:
    """Run r1 of the store at ``path`` to its end on a worker of ``client``; the store, to read what it wrote."""
    import trio

    from orchestrator.cluster import Worker

    store = sqlite_run_store(path)
    worker = Worker(client, store, name="b", poll_seconds=0.02)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await until_final(store, "r1")
            nursery.cancel_scope.cancel()
    return store


def _claimed(tmp_path: Path) -> DurableRun:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    store.create_run("s1", "r1", {"role": "user", "content": "hi"})
    (lease,) = store.claim("w1", 30.0)
    return DurableRun(store, lease, lambda event, config: False, started=("c1", "c2"))


async def test_an_inbox_item_seen_again_after_the_commit_that_consumed_it_is_not_consumed_twice(tmp_path: Path) -> None:
    durable = _claimed(tmp_path)
    item, _ = durable.store.post(NewInboxItem("s1", "r1", "steering", {"content": "stale"}))
    assert durable.offer_item(item)  # refused by every extension: used up, consumed at the next commit
    await durable.commit()
    # A poll that read the inbox before that commit hands the same item over again.
    assert durable.offer_item(item)
    await durable.commit()  # consuming it twice would fail this commit (and with it the run)
    assert not durable.lost
    assert durable.store.inbox("r1") == []


async def test_a_call_whose_result_is_committed_is_no_longer_an_intent_without_result(tmp_path: Path) -> None:
    durable = _claimed(tmp_path)
    result = ToolMessage("c1", "lookup", "value")
    event = MessageAppendedEvent(session_id="s1", request_id="r1", seq=1, ts=0.0, message=result, index=1)
    await _listened(durable).on_event(_Context("awaiting_tool"), event)  # type: ignore[arg-type]
    # The checkpoint of that commit no longer lists c1 as started: a worker taking over (before
    # tool_completed was committed) neither waits for it nor answers it "worker stopped".
    record = durable.store.run("r1")
    assert record is not None and record.checkpoint is not None
    assert record.checkpoint["started"] == ["c2"]
    assert durable.running_calls() == {"c2"}


async def test_a_commit_that_fails_keeps_what_it_did_not_write_for_the_next(tmp_path: Path) -> None:
    import pytest

    from orchestrator.messages import AssistantMessage
    from orchestrator.store.errors import StoreError
    from orchestrator.store.runs import StoredEvent

    durable = _claimed(tmp_path)
    real_commit = durable.store.commit
    failures = [StoreError("the database went away")]

    def flaky(lease, change):  # type: ignore[no-untyped-def]
        if failures:
            raise failures.pop()
        return real_commit(lease, change)

    durable.store.commit = flaky  # type: ignore[method-assign]
    durable.messages.append(AssistantMessage("kept"))
    durable.events.append(StoredEvent("r1", 1, "text_delta", {"type": "text_delta", "seq": 1}))
    with pytest.raises(StoreError):
        await durable.commit()
    durable.events.append(StoredEvent("r1", 2, "run_failed", {"type": "run_failed", "seq": 2}))
    await durable.commit("failed")
    assert [e.seq for e in durable.store.events("r1")] == [1, 2]
    assert [m.content for m in durable.store.history("s1")] == ["kept"]


async def test_a_cut_off_response_whose_worker_died_before_its_results_runs_none_of_its_calls_when_resumed(
    tmp_path: Path,
) -> None:
    import trio

    from orchestrator import AssistantMessage, ScriptedModel, ToolCall, ToolStatus, UserMessage, create_agent
    from orchestrator.cluster.checkpoint import Checkpoint
    from orchestrator.store.runs import RunCommit
    from orchestrator.tools import tool

    ran: list[str] = []

    @tool
    def record(text: str) -> str:
        """Record a text.

        Args:
            text: what to record
        """
        ran.append(text)
        return "recorded"

    path = str(tmp_path / "runs.db")
    dead_store = sqlite_run_store(path)
    dead_store.create_run("s1", "r1", {"role": "user", "content": "go"})
    (dead,) = dead_store.claim("dead", 0.05)
    cut = AssistantMessage(tool_calls=[ToolCall("c1", "record", {"text": "half of wh"})])
    # What a worker commits when the response is appended (its failed results come in the next commit).
    checkpoint = Checkpoint({}, 1, True, (), (), None, stop_reason="max_tokens")
    dead_store.commit(dead, RunCommit(messages=(UserMessage("go"), cut), checkpoint=checkpoint.json()))
    await trio.sleep(0.1)  # the lease runs out: the worker is gone

    client = await create_agent(ScriptedModel([AssistantMessage("I will write less.")]), tools=[record])
    store = await _carried_to_its_end(client, path)
    assert store.run("r1").status == "completed"  # type: ignore[union-attr]
    assert ran == []
    history = store.history("s1")
    (result,) = [m for m in history if isinstance(m, ToolMessage)]
    assert result.status is ToolStatus.FAILED and "max_tokens" in result.text
    assert history[-1] == AssistantMessage("I will write less.")


async def test_a_runs_input_goes_into_its_history_with_the_runs_next_commit(tmp_path: Path) -> None:
    from orchestrator.messages import UserMessage

    durable = _claimed(tmp_path)
    event = MessageAppendedEvent(session_id="s1", request_id="r1", seq=1, ts=0.0, message=UserMessage("hi"), index=0)
    await _listened(durable).on_event(_Context("setup"), event)  # type: ignore[arg-type]
    record = durable.store.run("r1")
    assert record is not None and record.checkpoint is None and durable.store.history("s1") == []
    await durable.commit()  # the step that follows, or the flush of the events streamed meanwhile
    record = durable.store.run("r1")
    assert record is not None and record.checkpoint is not None and record.checkpoint["input_recorded"] is True
    assert durable.store.history("s1") == [UserMessage("hi")]


async def test_a_run_whose_worker_stopped_before_its_first_commit_starts_again_from_its_input_once(
    tmp_path: Path,
) -> None:
    import trio

    from orchestrator import AssistantMessage, ScriptedModel, UserMessage, create_agent

    path = str(tmp_path / "runs.db")
    dead_store = sqlite_run_store(path)
    dead_store.create_run("s1", "r1", {"role": "user", "content": "go"})
    dead_store.claim("dead", 0.05)  # the worker appended the input, asked the model, and died: nothing committed
    await trio.sleep(0.1)

    store = await _carried_to_its_end(await create_agent(ScriptedModel([AssistantMessage("done")])), path)
    assert store.history("s1") == [UserMessage("go"), AssistantMessage("done")]
    assert [event.type for event in store.events("r1")].count("run_started") == 1


async def test_a_runs_input_is_in_its_stored_history_while_the_model_still_thinks(tmp_path: Path) -> None:
    import trio

    from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, UserMessage, create_agent
    from orchestrator.cluster import Worker

    answer = trio.Event()

    async def slow(request: ModelRequest) -> AssistantMessage:
        await answer.wait()
        return AssistantMessage("done")

    store = sqlite_run_store(str(tmp_path / "runs.db"))
    store.create_run("s1", "r1", {"role": "user", "content": "go"})
    worker = Worker(await create_agent(ScriptedModel([slow])), store, name="w", poll_seconds=0.02)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            # The flush of the events streamed since the claim takes the input along: another node reading the
            # session sees the user's message before the model answers.
            while store.history("s1") != [UserMessage("go")]:
                await trio.sleep(0.02)
            record = store.run("r1")
            assert record is not None and record.status == "running"
            answer.set()
            while (record := store.run("r1")) is None or record.status != "completed":
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert store.history("s1") == [UserMessage("go"), AssistantMessage("done")]

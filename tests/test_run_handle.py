"""Runs that outlive their consumers: client.start, RunHandle, the retained event log, attach."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from support import asks, call

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ModelError,
    ScriptedModel,
    SessionBusy,
    create_agent,
)
from orchestrator.events import AgentEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.model import ResponseCompletedEvent, TextDeltaEvent
from orchestrator.runtime.handle import EventsExpired, RunCancelled, UnknownRun

TERMINAL = {"run_completed", "run_failed", "run_cancelled"}


def answer(tool_call_id: str, value: str) -> ExternalEvent:
    return ExternalEvent("ask_user_response", {"tool_call_id": tool_call_id, "answer": value})


async def asking_client():  # type: ignore[no-untyped-def]
    question = call("q1", "ask_user", question="Go on?", options=["yes", "no"])
    model = ScriptedModel([asks(question), AssistantMessage("done now")])
    return await create_agent(model, extensions=[AskUserExtension()])


async def read_all(events) -> list[AgentEvent]:  # type: ignore[no-untyped-def]
    return [event async for event in events]


async def test_a_run_detached_for_a_whole_approval_wait_is_reattached_and_every_event_seen_once() -> None:
    client = await asking_client()
    handle = await client.start("deploy?", config=AgentRunConfig("s1"))
    seen: list[AgentEvent] = []
    with trio.fail_after(5):
        async for event in handle.events():
            seen.append(event)
            if event.name == "ask_user":
                break  # the consumer leaves while the call waits
        last = len(seen)
        assert handle.state == "awaiting_approval"
        await trio.testing.wait_all_tasks_blocked()
        assert handle.state == "awaiting_approval" and not handle.done  # leaving did not touch the run
        taken = client.agent.emit_external_event(answer("q1", "yes"), config=AgentRunConfig("s1"))
        assert taken == ["AskUserExtension"]
        assert (await handle.result()).content == "done now"  # finished with nobody reading
        again = client.attach(handle.request_id)
        assert again is handle and handle.state == "completed" and handle.done
        rest = await read_all(again.events(after=last))
    assert rest[0].seq == last + 1
    whole = await read_all(handle.events())
    assert seen + rest == whole
    assert len({id(event) for event in whole}) == len(whole)
    assert whole[-1].name == "run_completed" and whole[0].name == "transition"
    assert [e.name for e in rest].count("tool_completed") == 1
    assert handle.last_seq == len(whole)
    assert [e.seq for e in whole] == list(range(1, len(whole) + 1))


async def test_two_consumers_at_different_speeds_see_the_same_sequence() -> None:
    model = ScriptedModel([AssistantMessage(" ".join(f"w{i}" for i in range(300)))])
    client = await create_agent(model)
    handle = await client.start("talk", config=AgentRunConfig("s"))
    got: dict[str, list[AgentEvent]] = {"fast": [], "slow": []}

    async def consume(name: str, pause: bool) -> None:
        async for event in handle.events():
            got[name].append(event)
            if pause:
                await trio.sleep(0)
                await trio.lowlevel.checkpoint()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume, "fast", False)
            nursery.start_soon(consume, "slow", True)
    assert got["fast"] == got["slow"]
    assert sum(e.name == "text_delta" for e in got["fast"]) == 300
    assert got["fast"][-1].name == "run_completed"


async def test_session_busy_is_raised_by_start_itself() -> None:
    client = await asking_client()
    first = await client.start("one", config=AgentRunConfig("s"))
    with trio.fail_after(5):
        async for event in first.events():
            if event.name == "ask_user":
                break
        with pytest.raises(SessionBusy):
            await client.start("two", config=AgentRunConfig("s"))
        other = await client.start("elsewhere", config=AgentRunConfig("t"))
        assert other.session_id == "t"
        first.cancel()
        other.cancel()
        await first.wait()
        await other.wait()


async def test_cancel_settles_the_waiting_call_and_result_says_cancelled() -> None:
    client = await asking_client()
    handle = await client.start("deploy?", config=AgentRunConfig("s"))
    with trio.fail_after(5):
        follower = handle.events()
        async for event in follower:
            if event.name == "ask_user":
                break
        handle.cancel()
        with pytest.raises(RunCancelled):
            await handle.result()
        tail = [event.name async for event in follower]
    assert handle.state == "cancelled"
    assert "tool_cancelled" in tail and tail[-1] == "run_cancelled"
    assert client.agent.emit_external_event(answer("q1", "yes"), config=AgentRunConfig("s")) == []


async def test_result_raises_the_runs_error() -> None:
    def broken(request):  # type: ignore[no-untyped-def]
        raise ModelError("provider down")

    client = await create_agent(ScriptedModel([broken]))
    handle = await client.start("hi", config=AgentRunConfig("s"))
    with trio.fail_after(5):
        with pytest.raises(ModelError, match="provider down"):
            await handle.result()
        names = [e.name async for e in handle.events()]
    assert handle.state == "failed" and names[-1] == "run_failed"


async def test_the_log_is_bounded_and_an_expired_seq_is_a_clear_error() -> None:
    model = ScriptedModel([AssistantMessage(" ".join(f"w{i}" for i in range(100)))])
    client = await create_agent(model)
    handle = await client.start("talk", config=AgentRunConfig("s"), retain_events=10)
    with trio.fail_after(5):
        await handle.result()  # nobody read: the run never waited for a reader
    assert handle.last_seq > 100 and handle.first_seq == handle.last_seq - 9
    with pytest.raises(EventsExpired) as expired:
        handle.events(after=0)
    assert expired.value.first == handle.first_seq and expired.value.after == 0
    assert "no longer retained" in str(expired.value)
    tail = await read_all(handle.events(after=handle.last_seq - 10))
    assert len(tail) == 10 and tail[-1].name == "run_completed"
    assert await read_all(handle.events(after=handle.last_seq)) == []


@pytest.mark.parametrize("after", ["3", None, 2.5, True])
async def test_an_after_that_is_not_a_seq_is_a_type_error_at_once(after: object) -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("hi")]))
    handle = await client.start("talk", config=AgentRunConfig("s"))
    with trio.fail_after(5):
        await handle.result()
    with pytest.raises(TypeError, match="after must be a seq"):
        handle.events(after=after)  # type: ignore[arg-type]


async def test_a_reader_that_falls_behind_the_log_gets_events_expired() -> None:
    release = trio.Event()

    async def slow_answer(request):  # type: ignore[no-untyped-def]
        await release.wait()
        return AssistantMessage(" ".join(f"w{i}" for i in range(50)))

    client = await create_agent(ScriptedModel([slow_answer]))
    handle = await client.start("talk", config=AgentRunConfig("s"), retain_events=5)
    with trio.fail_after(5):
        follower = handle.events()
        first = await follower.__anext__()
        assert first.name == "transition"
        release.set()
        await handle.wait()
        with pytest.raises(EventsExpired):
            await read_all(follower)


async def test_attach_finds_live_and_recent_runs_only() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("ok")], repeat_last=True))
    client.agent.runs.keep = 2
    with pytest.raises(UnknownRun) as unknown:
        client.attach("nope")
    assert isinstance(unknown.value, KeyError) and "'nope'" in str(unknown.value)
    ids = []
    with trio.fail_after(5):
        for index in range(3):
            handle = await client.start("hi", config=AgentRunConfig("s", request_id=f"r{index}"))
            assert client.attach(f"r{index}") is handle
            await handle.result()
            ids.append(handle.request_id)
    with pytest.raises(UnknownRun):
        client.attach("r0")
    assert client.attach("r1").state == "completed" and client.attach("r2").done


async def test_a_handle_does_not_keep_its_finished_request() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("ok")]))
    handle = await client.start("hi", config=AgentRunConfig("s"))
    with trio.fail_after(5):
        await handle.result()
    assert handle._outcome.run is None
    assert handle.states == {"phase": "completed", "mode": "normal"}


async def test_a_model_that_never_awaits_still_lets_readers_and_cancellation_in() -> None:
    produced = 0

    class Eager:
        async def stream(self, request):  # type: ignore[no-untyped-def]
            nonlocal produced
            for _ in range(100_000):
                produced += 1
                yield TextDeltaEvent("x")
            yield ResponseCompletedEvent(AssistantMessage("x"))

    client = await create_agent(Eager())
    handle = await client.start("go", config=AgentRunConfig("s"), retain_events=1_000)
    read = 0
    with trio.fail_after(10):
        async for _event in handle.events():
            read += 1
            if read == 500:
                handle.cancel()
        with pytest.raises(RunCancelled):
            await handle.result()
    assert produced < 100_000  # the cancellation got in while the model was streaming
    assert handle.state == "cancelled"


async def test_a_reused_request_id_attaches_to_the_latest_run() -> None:
    client = await asking_client()
    client.agent.model = ScriptedModel([asks(call("q1", "ask_user", question="Go?", options=[]))], repeat_last=True)
    with trio.fail_after(5):
        first = await client.start("one", config=AgentRunConfig("s1", request_id="same"))
        second = await client.start("two", config=AgentRunConfig("s2", request_id="same"))
        assert client.attach("same") is second
        second.cancel()
        await second.wait()
        assert client.attach("same") is second  # the latest started, also once it ended
        first.cancel()
        await first.wait()
        assert client.attach("same") is second  # the earlier run ending does not take the id back


async def test_retain_events_must_be_a_whole_number() -> None:
    import pytest

    from orchestrator import AssistantMessage, ScriptedModel, create_agent

    client = await create_agent(ScriptedModel([AssistantMessage("ok")]))
    for bad in ("10", None, 2.5):
        with pytest.raises(TypeError, match="retain_events must be an int"):
            await client.start("hi", retain_events=bad)  # type: ignore[arg-type]
    assert client.agent.running() == []

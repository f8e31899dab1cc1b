"""CompactionExtension: summarize older history through the model on Agent.compact or in each turn."""

from __future__ import annotations

import itertools
from pathlib import Path

from support import asks, call

from orchestrator import (
    AgentEvent,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    Message,
    ScriptedModel,
    SystemMessage,
    ToolMessage,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.events import CompactionCompletedEvent, CompactionStartedEvent
from orchestrator.extensions.compaction import SUMMARY_PREFIX, CompactionExtension, estimate_tokens, split_point
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.history import InMemoryHistory

LONG = "x" * 400  # 100 estimated tokens


def conversation() -> list[Message]:
    return [
        UserMessage("first task " + LONG),
        AssistantMessage("looking", [call("a", "read", path="f.txt")]),
        ToolMessage("a", "read", "contents " + LONG),
        AssistantMessage("first done"),
        UserMessage("second task"),
        AssistantMessage("two calls", [call("b", "read", path="g"), call("c", "read", path="h")]),
        ToolMessage("b", "read", "g body"),
        ToolMessage("c", "read", "h body"),
        AssistantMessage("second done"),
    ]


def test_estimate_and_split_point_never_start_with_a_result() -> None:
    messages = conversation()
    assert estimate_tokens([UserMessage("abcd" * 10)]) == 10
    assert split_point(messages, 2) == 5  # index 7 is a result: back to the assistant message at 5
    assert isinstance(messages[split_point(messages, 3)], AssistantMessage)
    assert split_point(messages, 100) == 0


async def test_by_hand_below_the_threshold_it_still_compacts_and_says_what_it_did() -> None:
    history = InMemoryHistory()
    history.replace("s", conversation())
    summarizer = ScriptedModel([AssistantMessage("short summary")])
    seen: list[AgentEvent] = []

    class Watch(AgentExtension):
        async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
            seen.append(event)

    compaction = CompactionExtension(summarizer, threshold_tokens=10_000, keep_last=2)
    client = await create_agent(ScriptedModel([]), history=history, extensions=[compaction, Watch()])
    done = await client.agent.compact(AgentRunConfig("s"))
    assert len(summarizer.requests) == 1
    assert history.load("s") == [UserMessage(SUMMARY_PREFIX + "short summary"), *conversation()[5:]]
    assert isinstance(done, CompactionCompletedEvent)
    assert (done.tokens_before, done.messages_replaced) == (estimate_tokens(conversation()), 5)
    assert done.tokens_after == estimate_tokens(history.load("s")) < done.tokens_before
    names = [e.name for e in seen if e.name.startswith("compaction")]
    assert names == ["compaction_started", "compaction_completed"]
    [started] = [e for e in seen if isinstance(e, CompactionStartedEvent)]
    assert started.tokens_before == done.tokens_before and 0 < started.seq < done.seq


async def test_by_hand_with_nothing_to_compact_the_model_is_not_called() -> None:
    history = InMemoryHistory()
    kept = [UserMessage(SUMMARY_PREFIX + "earlier"), *conversation()[5:]]
    history.replace("s", kept)
    summarizer = ScriptedModel([])
    client = await create_agent(
        ScriptedModel([]),
        history=history,
        extensions=[CompactionExtension(summarizer, threshold_tokens=0, keep_last=4)],
    )
    assert await client.agent.compact(AgentRunConfig("s")) is None  # only an earlier summary is older than the tail
    history.replace("s", conversation()[:2])
    assert await client.agent.compact(AgentRunConfig("s")) is None  # shorter than keep_last
    assert summarizer.requests == []
    assert history.load("s") == conversation()[:2]


async def test_above_the_threshold_older_messages_become_a_summary() -> None:
    history = InMemoryHistory()
    history.replace("s", conversation())
    summarizer = ScriptedModel([AssistantMessage("The user asked for two tasks; f.txt was read.")])
    main = ScriptedModel([AssistantMessage("continuing")])
    compaction = CompactionExtension(summarizer, threshold_tokens=100, keep_last=2)
    client = await create_agent(main, history=history, extensions=[compaction], system_prompt="sys")
    await client.agent.compact(AgentRunConfig("s"))

    [request] = summarizer.requests
    assert request.tools == ()
    prompt = request.messages[-1]
    assert isinstance(prompt, UserMessage)
    assert "first task" in prompt.text and "contents" in prompt.text and "second task" in prompt.text
    assert "h body" not in prompt.text  # the kept tail is not summarized
    recent = conversation()[5:]
    stored = history.load("s")
    assert stored == [UserMessage(SUMMARY_PREFIX + "The user asked for two tasks; f.txt was read."), *recent]

    await client.run("next", config=AgentRunConfig("s"))
    assert main.requests[0].messages == (SystemMessage("sys"), *stored, UserMessage("next"))


@tool(serial=True)  # results in call order
def read(path: str) -> str:
    """Read a file.

    Args:
        path: which file
    """
    return {"f.txt": "contents " + LONG, "g": "g body", "h": "h body"}[path]


async def stored_conversation(path: Path) -> SQLiteSessionStore:
    """A store whose session "s" holds conversation(), written by real requests."""
    store = SQLiteSessionStore(path)
    replies = [m for m in conversation() if isinstance(m, AssistantMessage)]
    writer = await create_agent(ScriptedModel(replies), tools=[read], history=None, extensions=[store])
    await writer.run("first task " + LONG, config=AgentRunConfig("s"))
    await writer.run("second task", config=AgentRunConfig("s"))
    assert store.messages("s") == conversation()
    return store


async def test_tool_calls_and_their_results_stay_together_in_sqlite(tmp_path: Path) -> None:
    store = await stored_conversation(tmp_path / "s.db")

    summarizer = ScriptedModel([AssistantMessage("summary text")])
    events: list[AgentEvent] = []

    class Watch(AgentExtension):
        async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
            events.append(event)

    client = await create_agent(
        ScriptedModel([]),
        history=None,
        extensions=[store, CompactionExtension(summarizer, threshold_tokens=50, keep_last=3), Watch()],
    )
    await client.agent.compact(AgentRunConfig("s"))
    stored = SQLiteSessionStore(tmp_path / "s.db").messages("s")
    assert stored == [UserMessage(SUMMARY_PREFIX + "summary text"), *conversation()[5:]]
    kept = stored[1:]
    assert isinstance(kept[0], AssistantMessage) and kept[0].tool_calls
    answered = {m.tool_call_id for m in kept if isinstance(m, ToolMessage)}
    assert answered == {c.id for c in kept[0].tool_calls}
    [compacted] = [e for e in events if isinstance(e, CompactionCompletedEvent)]
    assert compacted.messages_replaced == 5
    assert compacted.tokens_after < compacted.tokens_before


async def test_compaction_of_an_agent_session_after_real_requests() -> None:
    history = InMemoryHistory()
    model = ScriptedModel(
        [asks(call("t1", "echo", text=LONG)), AssistantMessage("echoed " + LONG), AssistantMessage("short")]
    )
    summarizer = ScriptedModel([AssistantMessage("echo was used once")])

    @tool
    def echo(text: str) -> str:
        """Echo a text.

        Args:
            text: the text
        """
        return text

    client = await create_agent(
        model,
        tools=[echo],
        history=history,
        extensions=[CompactionExtension(summarizer, threshold_tokens=100, keep_last=2)],
    )
    await client.run("echo something long", config=AgentRunConfig("s"))
    await client.run("and now?", config=AgentRunConfig("s"))
    await client.agent.compact(AgentRunConfig("s"))
    assert history.load("s") == [
        UserMessage(SUMMARY_PREFIX + "echo was used once"),
        UserMessage("and now?"),
        AssistantMessage("short"),
    ]


async def test_without_a_model_of_its_own_the_agents_model_summarizes() -> None:
    history = InMemoryHistory()
    history.replace("s", conversation())
    model = ScriptedModel([AssistantMessage("own summary")])
    client = await create_agent(
        model, history=history, extensions=[CompactionExtension(threshold_tokens=100, keep_last=2)]
    )
    await client.agent.compact(AgentRunConfig("s"))
    [request] = model.requests
    assert isinstance(request.messages[0], SystemMessage) and request.tools == ()
    assert history.load("s") == [UserMessage(SUMMARY_PREFIX + "own summary"), *conversation()[5:]]


async def test_auto_compaction_runs_in_the_turn_between_assembly_and_before_model() -> None:
    history = InMemoryHistory()
    history.replace("s", conversation())
    summarizer = ScriptedModel([AssistantMessage("two tasks were done")])
    main = ScriptedModel([AssistantMessage("third done")])
    seen: list[tuple[str, int]] = []

    class Watch(AgentExtension):
        async def before_turn(self, context):  # type: ignore[no-untyped-def]
            seen.append(("before_turn", len(context.messages)))

        async def before_model(self, context, request):  # type: ignore[no-untyped-def]
            seen.append(("before_model", len(request.messages)))

    compaction = CompactionExtension(summarizer, threshold_tokens=100, keep_last=2, auto=True)
    client = await create_agent(main, history=history, extensions=[Watch(), compaction], system_prompt="sys")
    events = [e async for e in client.stream("third task", config=AgentRunConfig("s"))]

    summary = UserMessage(SUMMARY_PREFIX + "two tasks were done")
    kept = [AssistantMessage("second done"), UserMessage("third task")]
    assert main.requests[0].messages == (SystemMessage("sys"), summary, *kept)
    assert seen == [("before_turn", 11), ("before_model", 4)]
    names = [e.name for e in events if e.name != "transition"]
    assert names[:5] == ["run_started", "compaction_started", "compaction_completed", "model_started", "text_delta"]
    [compacted] = [e for e in events if isinstance(e, CompactionCompletedEvent)]
    assert compacted.messages_replaced == 8
    assert compacted.tokens_after == estimate_tokens([SystemMessage("sys"), summary, *kept]) < compacted.tokens_before
    assert history.load("s") == [summary, *kept, AssistantMessage("third done")]


async def test_auto_compaction_is_stored_by_the_sqlite_store_and_off_by_default(tmp_path: Path) -> None:
    store = await stored_conversation(tmp_path / "s.db")
    summarizer = ScriptedModel([AssistantMessage("earlier work")])
    main = ScriptedModel([AssistantMessage("ok"), AssistantMessage("ok again")])
    manual = CompactionExtension(summarizer, threshold_tokens=100, keep_last=2)
    client = await create_agent(main, history=None, extensions=[store, manual])
    await client.run("no compaction yet", config=AgentRunConfig("s"))
    assert summarizer.requests == []
    assert len(store.messages("s")) == len(conversation()) + 2

    manual.auto = True
    await client.run("now compact", config=AgentRunConfig("s"))
    assert store.messages("s") == [
        UserMessage(SUMMARY_PREFIX + "earlier work"),
        AssistantMessage("ok"),
        UserMessage("now compact"),
        AssistantMessage("ok again"),
    ]
    store.close()


async def test_auto_compaction_does_not_summarize_a_summary_it_cannot_shrink_in_every_turn() -> None:
    history = InMemoryHistory()
    history.replace("s", conversation())
    verbose = "y" * 600  # a 150-token summary: over the threshold by itself
    summarizer = ScriptedModel([AssistantMessage(verbose)], repeat_last=True)
    main = ScriptedModel([AssistantMessage("a short reply")], repeat_last=True)
    compaction = CompactionExtension(summarizer, threshold_tokens=100, keep_last=2, auto=True)
    client = await create_agent(main, history=history, extensions=[compaction])
    passes: list[int] = []
    for turn in range(6):
        events = [e async for e in client.stream(f"turn {turn}", config=AgentRunConfig("s"))]
        passes.append(sum(isinstance(e, CompactionCompletedEvent) for e in events))
    assert passes == [1, 0, 0, 0, 0, 0]
    assert len(summarizer.requests) == 1
    done: list[tuple[int, CompactionCompletedEvent | None]] = []
    for turn in range(6, 30):
        events = [e async for e in client.stream(f"turn {turn} " + "z" * 120, config=AgentRunConfig("s"))]
        completed = [e for e in events if isinstance(e, CompactionCompletedEvent)]
        done.append((turn, completed[0] if completed else None))
    passes_at = [(turn, event) for turn, event in done if event is not None]
    assert 2 <= len(passes_at) <= 8  # about every fourth turn, with 30 tokens more per turn
    for (turn, event), (next_turn, next_event) in itertools.pairwise(passes_at):
        assert next_turn > turn + 1  # never in two turns in a row
        assert next_event.tokens_before > event.tokens_after + 100  # only once grown by another threshold
    assert history.load("s")[0] == UserMessage(SUMMARY_PREFIX + verbose)


async def test_auto_compaction_only_runs_above_the_threshold() -> None:
    history = InMemoryHistory()
    history.replace("s", conversation())
    summarizer = ScriptedModel([])
    compaction = CompactionExtension(summarizer, threshold_tokens=estimate_tokens(conversation()) + 50, auto=True)
    client = await create_agent(ScriptedModel([AssistantMessage("ok")]), history=history, extensions=[compaction])
    events = [e.name async for e in client.stream("hi", config=AgentRunConfig("s"))]
    assert summarizer.requests == [] and not [n for n in events if n.startswith("compaction")]

"""Per-run context: deps and metadata seen by tools and hooks, kept by a durable run, and stable idempotency keys."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolCall,
    ToolMessage,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.cluster import Worker
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.config import METADATA_LIMIT, MetadataError
from orchestrator.server.backend import RunStart
from orchestrator.store.runs_sql import sqlite_run_store


class Services:
    """What an application hands its tools: here, who the run acts for."""

    def __init__(self, user: str) -> None:
        self.user = user


seen: list[tuple[str, Any, dict[str, Any]]] = []


@tool
def whoami(context: AgentRunContext) -> str:
    """Say who the run acts for."""
    seen.append(("tool", context.deps, dict(context.metadata)))
    return context.deps.user if context.deps is not None else "nobody"


class Watcher(AgentExtension):
    async def before_run(self, context: AgentRunContext) -> None:
        seen.append(("hook", context.deps, dict(context.metadata)))


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


def _model() -> ScriptedModel:
    return ScriptedModel([AssistantMessage(tool_calls=(ToolCall("c1", "whoami"),)), AssistantMessage("done")])


async def test_deps_and_metadata_reach_tools_and_hooks_with_run_stream_and_start() -> None:
    ada = Services("ada")
    config = AgentRunConfig("s1", metadata={"tenant": "acme", "roles": ["admin"]})
    client = await create_agent(_model(), tools=[whoami], extensions=[Watcher()])
    await client.run("who?", config=config, deps=ada)
    roles = {"tenant": "acme", "roles": ["admin"]}
    assert seen == [("hook", ada, roles), ("tool", ada, roles)]

    seen.clear()
    client = await create_agent(_model(), tools=[whoami], extensions=[Watcher()])
    events = [event async for event in client.stream("who?", config=config, deps=ada)]
    (started,) = [e for e in events if e.name == "run_started"]
    assert started.payload["metadata"] == {"tenant": "acme", "roles": ["admin"]}
    assert [who for who, deps, _ in seen if deps is ada] == ["hook", "tool"]

    seen.clear()
    client = await create_agent(_model(), tools=[whoami])
    handle = await client.start("who?", config=config, deps=ada)
    await handle.result()
    assert seen == [("tool", ada, {"tenant": "acme", "roles": ["admin"]})]


async def test_deps_factory_makes_deps_from_metadata_when_a_run_is_given_none() -> None:
    made: list[dict[str, Any]] = []

    def factory(metadata: Any) -> Services:
        made.append(dict(metadata))
        return Services(metadata["user"])

    client = await create_agent(_model(), tools=[whoami], deps_factory=factory)
    answer = await client.run("who?", config=AgentRunConfig("s1", metadata={"user": "bea"}))
    assert answer.content == "done"
    assert made == [{"user": "bea"}]
    (tool_saw,) = seen
    assert tool_saw[1].user == "bea"
    # deps given with the request win: the factory is not asked
    client = await create_agent(_model(), tools=[whoami], deps_factory=factory)
    await client.run("who?", config=AgentRunConfig("s2", metadata={"user": "bea"}), deps=Services("cy"))
    assert made == [{"user": "bea"}] and seen[-1][1].user == "cy"


def test_metadata_must_be_a_small_json_object() -> None:
    with pytest.raises(MetadataError, match=r"metadata\.user\.since: date is not a JSON type") as bad:
        import datetime

        AgentRunConfig(metadata={"user": {"since": datetime.date(2024, 1, 1)}})
    assert bad.value.path == "metadata.user.since"
    with pytest.raises(MetadataError, match="keys must be strings"):
        AgentRunConfig(metadata={1: "one"})
    with pytest.raises(MetadataError, match="nan is not a JSON number"):
        AgentRunConfig(metadata={"x": float("nan")})
    with pytest.raises(MetadataError, match=f"more than the {METADATA_LIMIT} allowed"):
        AgentRunConfig(metadata={"blob": "x" * METADATA_LIMIT})
    with pytest.raises(TypeError, match="metadata must be a mapping, got list"):
        AgentRunConfig(metadata=["a"])
    # a copy: the caller's later changes do not reach the run
    given = {"tags": ["a"]}
    config = AgentRunConfig(metadata=given)
    given["tags"].append("b")
    assert config.metadata == {"tags": ["a"]}


def test_the_idempotency_key_depends_on_the_session_request_and_call() -> None:
    from orchestrator.runtime.context import idempotency_key

    key = idempotency_key("s1", "r1", "c1")
    assert key.startswith("call-") and len(key) == 45
    assert key == idempotency_key("s1", "r1", "c1")
    assert (
        len(
            {
                key,
                idempotency_key("s1", "r1", "c2"),
                idempotency_key("s1", "r2", "c1"),
                idempotency_key("s2", "r1", "c1"),
            }
        )
        == 4
    )


async def test_a_resumed_run_gets_fresh_deps_from_its_stored_metadata_and_the_same_idempotency_key(
    tmp_path: Path,
) -> None:
    charges: list[tuple[str, str, dict[str, Any]]] = []  # (idempotency key, deps, metadata) per execution
    running = trio.Event()

    @tool(idempotent=True)
    async def charge(amount: int, context: AgentRunContext, call: ToolCall) -> str:
        """Charge the user.

        Args:
            amount: cents
        """
        charges.append((context.idempotency_key(call), context.deps, dict(context.metadata)))
        if len(charges) == 1:
            running.set()
            await trio.sleep_forever()  # the first worker stops here
        return "charged"

    def script(request: ModelRequest) -> AssistantMessage:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AssistantMessage("charged you")
        return AssistantMessage(tool_calls=(ToolCall("c1", "charge", {"amount": 500}),))

    path = str(tmp_path / "runs.db")
    store = sqlite_run_store(path)
    await StoreBackend(store).start(
        RunStart("s1", UserMessage("charge me"), request_id="r1", metadata={"user": "ada"})
    )
    stored = store.run("r1")
    assert stored is not None and stored.input["metadata"] == {"user": "ada"}

    first = await create_agent(
        ScriptedModel([script], repeat_last=True), tools=[charge], deps_factory=lambda m: f"first:{m['user']}"
    )
    worker = Worker(first, sqlite_run_store(path), name="a", poll_seconds=0.02, lease_seconds=0.3)
    crashed = str(tmp_path / "crashed.db")
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await running.wait()
            while "c1" not in ((store.run("r1") or stored).checkpoint or {}).get("started", []):
                await trio.sleep(0.02)
            # The database as a worker that died here would leave it: the call started, no result.
            with sqlite3.connect(path) as source, sqlite3.connect(crashed) as copy:
                source.backup(copy)
            nursery.cancel_scope.cancel()
    await trio.sleep(0.4)  # the dead worker's lease runs out

    second = await create_agent(
        ScriptedModel([script], repeat_last=True), tools=[charge], deps_factory=lambda m: f"second:{m['user']}"
    )
    store = sqlite_run_store(crashed)
    worker = Worker(second, store, name="b", poll_seconds=0.02)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while (record := store.run("r1")) is None or not record.final:
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert record.status == "completed"
    assert [deps for _, deps, _ in charges] == ["first:ada", "second:ada"]
    assert [metadata for _, _, metadata in charges] == [{"user": "ada"}, {"user": "ada"}]
    (key,) = {key for key, _, _ in charges}
    assert key.startswith("call-")
    run_started = [e.body for e in store.events("r1") if e.type == "run_started"]
    assert run_started[0]["metadata"] == {"user": "ada"}


async def test_a_run_whose_stored_metadata_is_not_an_object_fails_once_with_the_reason(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    store.create_run("s1", "r1", {"role": "user", "content": "hi", "metadata": "ada"})
    client = await create_agent(ScriptedModel([AssistantMessage("never")]), deps_factory=lambda m: m["user"])
    worker = Worker(client, store, name="w", poll_seconds=0.02)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while (record := store.run("r1")) is None or not record.final:
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert record.status == "failed"
    (failed,) = [e.body for e in store.events("r1") if e.type == "run_failed"]
    assert "its metadata is unusable (metadata must be a mapping, got str)" in failed["error"]["message"]

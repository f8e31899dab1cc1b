"""Under an AgentHost, the application's ``async def`` tools and extension hooks run on the application's
asyncio loop, with the contextvars of the code that started the run.

A FastAPI app under uvicorn (on the test's own loop, on a loopback port, driven with httpx) makes an
httpx client, an asyncio.Lock, an asyncio.Event and an aiosqlite connection in its lifespan; its tools use
them, and its extension's ``on_success`` writes through aiosqlite. A cancelled run (and a tool's timeout)
cancels the tool's asyncio task, whose ``finally`` runs on the app's loop before the run ends; a tool's
exception is its failed result; a tool task cancelled by the app is a cancelled call; and when the host
has closed no task or thread of it is left.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import (
    AgentRunConfig,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolMessage,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.extensions.base import HOOK_NAMES, AgentExtension
from orchestrator.host import AgentHost
from orchestrator.runtime.context import AgentRunContext
from orchestrator.runtime.handle import RunCancelled
from orchestrator.tools.loops import runs_on
from tests.support import asks, call

fastapi = pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install -e '.[test]')")
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e '.[test]')")

LIMIT = 20.0

#: Set by the route that starts a run: what the run's tools should see.
caller_tag: contextvars.ContextVar[str] = contextvars.ContextVar("caller_tag", default="unset")


def reply_to_tool(request: ModelRequest) -> AssistantMessage:
    """Calls the tool the user names (``tool:ARGUMENT``), then answers with the result's status and text."""
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        return AssistantMessage(f"{last.status}: {last.content}")
    assert isinstance(last, UserMessage)
    name, _, argument = str(last.content).partition(":")
    arguments = {"item": argument} if argument else {}
    return asks(call("c1", name, **arguments))


class Recorder:
    """Where each piece of app code ran: (what, the running asyncio loop or None, thread name, caller_tag)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, asyncio.AbstractEventLoop | None, str, str]] = []

    def note(self, what: str) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        self.seen.append((what, loop, threading.current_thread().name, caller_tag.get()))

    def named(self, what: str) -> list[tuple[str, asyncio.AbstractEventLoop | None, str, str]]:
        return [entry for entry in self.seen if entry[0] == what]


def build_app(db_path: Path, recorder: Recorder) -> tuple[Any, AgentHost, dict[str, Any]]:
    """The FastAPI app, its host, and what its lifespan made (``state``)."""
    import aiosqlite

    state: dict[str, Any] = {}

    @tool
    async def check_stock(item: str) -> str:
        """How many of ``item`` are in stock (asked over HTTP, one question at a time)."""
        async with state["lock"]:
            response = await state["http"].get(f"{state['base']}/stock/{item}")
            await asyncio.sleep(0.01)
        recorder.note("check_stock")
        return f"{item}: {response.json()['count']} in stock (for {caller_tag.get()})"

    @tool
    async def wait_forever() -> str:
        """Wait until cancelled; its finally takes a moment on the app's loop."""
        state["tasks"].append(asyncio.current_task())
        state["entered"].set()
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.2)  # the run must wait for this before it ends
            recorder.note("wait_forever finally")
        return "never"

    @tool(timeout=0.3)
    async def slow_lookup() -> str:
        """Takes longer than its timeout."""
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.1)
            recorder.note("slow_lookup finally")
        return "never"

    @tool
    async def broken() -> str:
        """Fails on the app's loop."""
        await asyncio.sleep(0)
        raise LookupError("no such warehouse")

    @tool(loop="trio")
    async def on_trio() -> str:
        """Declared for trio: awaits trio."""
        await trio.sleep(0)
        recorder.note("on_trio")
        return "trio was here"

    class Audit(AgentExtension):
        async def on_success(self, context: AgentRunContext, result: AssistantMessage) -> None:
            await state["db"].execute("INSERT INTO audit VALUES (?, ?)", (context.request_id, str(result.content)))
            await state["db"].commit()
            recorder.note("on_success")

        @runs_on("trio")
        async def before_run(self, context: AgentRunContext) -> None:
            await trio.sleep(0)
            recorder.note("before_run")

    tools = [check_stock, wait_forever, slow_lookup, broken, on_trio]
    host = AgentHost(
        lambda: create_agent(ScriptedModel([reply_to_tool], repeat_last=True), tools=tools, extensions=[Audit()])
    )

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        state["http"] = httpx.AsyncClient(timeout=10)
        state["lock"] = asyncio.Lock()
        state["entered"] = asyncio.Event()
        state["tasks"] = []
        state["db"] = await aiosqlite.connect(db_path)
        await state["db"].execute("CREATE TABLE audit (request_id TEXT, answer TEXT)")
        try:
            yield
        finally:
            await host.aclose()
            await state["db"].close()
            await state["http"].aclose()

    app = fastapi.FastAPI(lifespan=lifespan)

    @app.get("/stock/{item}")
    async def stock(item: str) -> dict[str, object]:
        return {"item": item, "count": len(item)}

    @app.post("/runs/{session_id}", status_code=202)
    async def start(session_id: str, request: fastapi.Request) -> dict[str, str]:
        caller_tag.set(request.headers.get("x-caller", "anonymous"))
        body = await request.json()
        run = await host.start(body["input"], config=AgentRunConfig(session_id))
        return {"request_id": run.request_id}

    @app.get("/runs/{request_id}/result")
    async def result(request_id: str) -> dict[str, str]:
        try:
            answer = await host.result(request_id)
        except RunCancelled:
            return {"state": "cancelled"}
        return {"state": "completed", "content": str(answer.content)}

    @app.post("/runs/{request_id}/cancel")
    async def cancel(request_id: str) -> dict[str, str]:
        await host.cancel(request_id)
        return {"cancelled": request_id}

    @app.post("/tool-tasks/cancel")
    async def cancel_tool_tasks() -> dict[str, int]:
        for task in state["tasks"]:
            task.cancel()
        return {"cancelled": len(state["tasks"])}

    @app.get("/audit")
    async def audit() -> list[list[str]]:
        async with state["db"].execute("SELECT request_id, answer FROM audit ORDER BY rowid") as rows:
            return [list(row) async for row in rows]

    return app, host, state


Scenario = Callable[[httpx.AsyncClient, dict[str, Any], Recorder, asyncio.AbstractEventLoop], Coroutine[Any, Any, None]]


def serve(tmp_path: Path, scenario: Scenario) -> None:
    """Run ``scenario`` against the app under uvicorn on this test's loop; then check nothing of the host is left."""
    pytest.importorskip("aiosqlite", reason="aiosqlite is not installed (pip install -e '.[test]')")
    recorder = Recorder()
    app, host, state = build_app(tmp_path / "audit.db", recorder)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        )
        serving = asyncio.create_task(server.serve())
        try:
            while not server.started:
                assert not serving.done(), "uvicorn did not start"
                await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            state["base"] = base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base, timeout=LIMIT) as http:
                await asyncio.wait_for(scenario(http, state, recorder, loop), LIMIT)
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, LIMIT)
        assert host.state == "closed"
        leftover = asyncio.all_tasks() - {asyncio.current_task()}
        assert not leftover, f"tasks left after the host closed: {leftover}"

    asyncio.run(main())
    alive = [thread.name for thread in threading.enumerate() if thread.name == "orchestrator-host"]
    assert not alive, f"threads left after the host closed: {alive}"


async def started(http: httpx.AsyncClient, session: str, text: str, caller: str = "anonymous") -> str:
    response = await http.post(f"/runs/{session}", json={"input": text}, headers={"x-caller": caller})
    assert response.status_code == 202, response.text
    request_id: str = response.json()["request_id"]
    return request_id


async def outcome(http: httpx.AsyncClient, request_id: str) -> dict[str, str]:
    response = await http.get(f"/runs/{request_id}/result")
    assert response.status_code == 200, response.text
    found: dict[str, str] = response.json()
    return found


def test_tools_and_hooks_use_the_lifespans_client_lock_and_database_on_the_apps_loop(tmp_path: Path) -> None:
    async def scenario(
        http: httpx.AsyncClient, state: dict[str, Any], recorder: Recorder, loop: asyncio.AbstractEventLoop
    ) -> None:
        first = await started(http, "s1", "check_stock:apples", caller="alice")
        second = await started(http, "s2", "check_stock:pears", caller="bob")
        answers = [await outcome(http, first), await outcome(http, second)]
        assert answers == [
            {"state": "completed", "content": "succeeded: apples: 6 in stock (for alice)"},
            {"state": "completed", "content": "succeeded: pears: 5 in stock (for bob)"},
        ]
        audit = (await http.get("/audit")).json()
        assert sorted(audit) == sorted([[first, answers[0]["content"]], [second, answers[1]["content"]]])
        here = threading.current_thread().name
        for what in ("check_stock", "on_success"):
            entries = recorder.named(what)
            assert len(entries) == 2, recorder.seen
            assert all(entry[1] is loop and entry[2] == here for entry in entries), entries
        assert sorted(entry[3] for entry in recorder.named("check_stock")) == ["alice", "bob"]
        assert sorted(entry[3] for entry in recorder.named("on_success")) == ["alice", "bob"]

    serve(tmp_path, scenario)


def test_a_tool_or_hook_declared_for_trio_runs_on_the_hosts_trio_thread(tmp_path: Path) -> None:
    async def scenario(
        http: httpx.AsyncClient, state: dict[str, Any], recorder: Recorder, loop: asyncio.AbstractEventLoop
    ) -> None:
        request_id = await started(http, "s1", "on_trio")
        assert await outcome(http, request_id) == {"state": "completed", "content": "succeeded: trio was here"}
        for what in ("on_trio", "before_run"):
            (entry,) = recorder.named(what)
            assert entry[1] is None and entry[2] == "orchestrator-host", entry

    serve(tmp_path, scenario)


def test_cancelling_a_run_mid_tool_runs_the_tools_finally_on_the_apps_loop_before_the_run_ends(
    tmp_path: Path,
) -> None:
    async def scenario(
        http: httpx.AsyncClient, state: dict[str, Any], recorder: Recorder, loop: asyncio.AbstractEventLoop
    ) -> None:
        request_id = await started(http, "s1", "wait_forever")
        await asyncio.wait_for(state["entered"].wait(), LIMIT)
        cancelled = await http.post(f"/runs/{request_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert await outcome(http, request_id) == {"state": "cancelled"}
        (entry,) = recorder.named("wait_forever finally")  # recorded before the run could end
        assert entry[1] is loop and entry[2] == threading.current_thread().name
        assert all(task.done() for task in state["tasks"])
        assert recorder.named("on_success") == []

    serve(tmp_path, scenario)


def test_a_tools_timeout_cancels_its_asyncio_task_and_waits_for_its_finally(tmp_path: Path) -> None:
    async def scenario(
        http: httpx.AsyncClient, state: dict[str, Any], recorder: Recorder, loop: asyncio.AbstractEventLoop
    ) -> None:
        request_id = await started(http, "s1", "slow_lookup")
        found = await outcome(http, request_id)
        assert found["content"].startswith("failed: timed out: slow_lookup did not finish within 0.3 s"), found
        (entry,) = recorder.named("slow_lookup finally")
        assert entry[1] is loop

    serve(tmp_path, scenario)


def test_a_tools_exception_on_the_apps_loop_is_its_failed_result(tmp_path: Path) -> None:
    async def scenario(
        http: httpx.AsyncClient, state: dict[str, Any], recorder: Recorder, loop: asyncio.AbstractEventLoop
    ) -> None:
        request_id = await started(http, "s1", "broken")
        found = await outcome(http, request_id)
        assert found == {"state": "completed", "content": "failed: LookupError: no such warehouse"}

    serve(tmp_path, scenario)


def test_a_tool_task_cancelled_by_the_app_is_a_cancelled_call(tmp_path: Path) -> None:
    async def scenario(
        http: httpx.AsyncClient, state: dict[str, Any], recorder: Recorder, loop: asyncio.AbstractEventLoop
    ) -> None:
        request_id = await started(http, "s1", "wait_forever")
        await asyncio.wait_for(state["entered"].wait(), LIMIT)
        assert (await http.post("/tool-tasks/cancel")).json() == {"cancelled": 1}
        found = await outcome(http, request_id)
        assert found == {
            "state": "completed",
            "content": "cancelled: tool 'wait_forever' was cancelled on the application's asyncio event loop",
        }
        (entry,) = recorder.named("wait_forever finally")
        assert entry[1] is loop

    serve(tmp_path, scenario)


def small_host() -> AgentHost:
    """A host whose app-side tool notes where it ran."""

    @tool
    async def where() -> str:
        """Where this runs."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return f"{threading.current_thread().name} as {caller_tag.get()}, without asyncio"
        return f"{threading.current_thread().name} as {caller_tag.get()}, on asyncio"

    return AgentHost(lambda: create_agent(ScriptedModel([reply_to_tool], repeat_last=True), tools=[where]))


def test_a_blocking_call_from_a_worker_thread_runs_app_tools_on_the_hosts_app_loop() -> None:
    async def main() -> str:
        async with small_host() as host:  # made in this loop: its app loop
            assert host.app_loop is asyncio.get_running_loop()

            def blocking() -> str:
                caller_tag.set("a worker thread")
                return str(host.sync.run("where").content)

            return await asyncio.wait_for(asyncio.to_thread(blocking), LIMIT)

    assert asyncio.run(main()) == "succeeded: MainThread as a worker thread, on asyncio"


def test_without_an_app_loop_an_app_tool_runs_on_the_hosts_trio_thread() -> None:
    with small_host() as host:  # driven only by blocking calls: no asyncio loop
        answer = host.sync.run("where")
    assert answer.content == "succeeded: orchestrator-host as unset, without asyncio"


def test_in_a_plain_trio_run_an_app_tool_runs_on_trio() -> None:
    @tool
    async def trio_sleeper() -> str:
        """Awaits trio."""
        await trio.sleep(0)
        return "slept on trio"

    assert trio_sleeper.on_app_loop  # it would run on an app loop, had the request one

    async def main() -> str:
        client = await create_agent(ScriptedModel([reply_to_tool], repeat_last=True), tools=[trio_sleeper])
        return str((await client.run("trio_sleeper")).content)

    assert trio.run(main) == "succeeded: slept on trio"


def test_the_choice_of_loop_is_checked_where_it_is_made() -> None:
    def plain() -> str:
        """A def tool."""
        return "plain"

    with pytest.raises(TypeError, match="loop='asyncio' needs an async def handler"):
        tool(loop="asyncio")(plain)
    with pytest.raises(ValueError, match="must be one of auto, trio, asyncio; got 'curio'"):
        tool(loop="curio")(plain)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="only an async def function can run on asyncio"):
        runs_on("asyncio")(plain)
    assert not tool(plain).on_app_loop
    assert not tool(loop="trio")(runs_on("asyncio")(trio_tool_function)).on_app_loop
    assert tool(runs_on("trio")(trio_tool_function)).loop == "trio"


def test_the_librarys_own_tools_and_hooks_stay_on_trio(tmp_path: Path) -> None:
    from orchestrator.extensions.ask_user import AskUserExtension
    from orchestrator.extensions.files.filesystem import filesystem_tools
    from orchestrator.runtime.app_loop import hook_on_app_loop

    assert [t.name for t in filesystem_tools(tmp_path) if t.on_app_loop] == []
    asking = AskUserExtension()
    assert not asking.tool.on_app_loop
    assert [name for name in HOOK_NAMES if hook_on_app_loop(asking, name)] == []

    class Mine(AskUserExtension):
        async def on_success(self, context: AgentRunContext, result: AssistantMessage) -> None:
            """The application's own hook."""

    mine = Mine()
    assert [name for name in HOOK_NAMES if hook_on_app_loop(mine, name)] == ["on_success"]
    mine.hook_loop = "trio"
    assert [name for name in HOOK_NAMES if hook_on_app_loop(mine, name)] == []


async def trio_tool_function() -> str:
    """An async tool function."""
    return "ok"


def test_a_tool_meant_for_a_loop_that_has_ended_fails_saying_so() -> None:
    @tool
    async def where() -> str:
        """Meant for the app's loop."""
        return "ran"

    async def late(request: ModelRequest) -> AssistantMessage:
        if isinstance(request.messages[-1], ToolMessage):
            return reply_to_tool(request)
        await trio.sleep(0.3)  # the caller's asyncio.run has ended (and closed its loop) by now
        return asks(call("c1", "where"))

    with AgentHost(lambda: create_agent(ScriptedModel([late], repeat_last=True), tools=[where])) as host:

        async def start() -> str:
            return (await host.start("go", config=AgentRunConfig("s1"))).request_id

        request_id = asyncio.run(start())
        answer = host.sync.result(request_id)
    assert answer.content == (
        "failed: AppLoopClosed: tool 'where' cannot run: the application's asyncio event loop is no longer running"
    )

"""The bash tool: working directory, exit code, output cap and timeout.

The tests that follow a process by its id from outside run bash unconfined (``FULL``): inside the
sandbox the command has its own PID namespace (tests/reliability/test_bash_sandbox.py covers it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from support import asks, call

from orchestrator import AssistantMessage, ScriptedModel, ToolCall, ToolMessage, ToolStatus, create_agent
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.files.bash import (
    LINGERED,
    MAX_COMMAND_BYTES,
    MAX_CONCURRENT,
    BashExtension,
    BashRunner,
    bash_tool,
)
from orchestrator.extensions.files.sandbox import Sandbox
from orchestrator.tools import ToolResult

FULL = Sandbox("full")


async def test_runs_in_the_root_and_reports_the_exit_code(tmp_path: Path) -> None:
    result = await BashRunner(tmp_path).run("pwd; echo oops >&2; exit 3")
    assert result.status == "succeeded"
    assert result.content == f"exit code: 3\n{tmp_path.resolve()}\noops\n"


async def test_output_beyond_the_cap_is_counted_and_dropped(tmp_path: Path) -> None:
    result = await BashRunner(tmp_path, max_output=10).run("head -c 100000 /dev/zero | tr '\\0' a")
    assert result.content == "exit code: 0\n" + "a" * 10 + "\n[output truncated: 99990 more bytes]"


def alive(pid: str) -> bool:
    """Whether a process exists and is not a zombie (Linux /proc)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except FileNotFoundError:
        return False
    return state not in "ZX"


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    start = trio.current_time()
    result = await BashRunner(tmp_path, timeout=0.5, sandbox=FULL).run("sleep 30 & echo $!; sleep 30")
    assert trio.current_time() - start < 5
    assert result.status == "failed"
    first, pid, *_ = result.content.splitlines()
    assert first == "timed out after 0.5s; the command was killed"
    if Path("/proc/self/stat").exists():
        with trio.fail_after(5):
            while alive(pid):
                await trio.sleep(0.01)


async def test_a_background_job_holding_the_output_is_no_timeout(tmp_path: Path) -> None:
    start = trio.current_time()
    result = await BashRunner(tmp_path, timeout=10, sandbox=FULL).run("sleep 30 & echo $!; echo done; exit 4")
    assert trio.current_time() - start < 5
    assert result.status == "succeeded"
    first, pid, done, *rest = result.content.splitlines()
    assert (first, done) == ("exit code: 4", "done")
    assert rest[-1] == f"[{LINGERED}]"
    if Path("/proc/self/stat").exists():
        with trio.fail_after(5):
            while alive(pid):
                await trio.sleep(0.01)


async def test_a_background_job_that_closed_its_output_does_not_delay_the_result(tmp_path: Path) -> None:
    start = trio.current_time()
    result = await BashRunner(tmp_path, timeout=10).run("sleep 3 >/dev/null 2>&1 & echo quick")
    assert trio.current_time() - start < 2
    assert result.content == "exit code: 0\nquick\n"


@pytest.mark.parametrize(
    "command", ["(sleep 30) >/dev/null 2>&1 & echo $!", "sleep 30 </dev/null >/dev/null 2>&1 & echo $!"]
)
async def test_no_background_job_in_the_shells_group_survives_the_call(tmp_path: Path, command: str) -> None:
    result = await BashRunner(tmp_path, timeout=10, sandbox=FULL).run(command)
    first, pid = result.content.splitlines()
    assert first == "exit code: 0"
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to see whether the job is still alive")
    with trio.fail_after(5):
        while alive(pid):
            await trio.sleep(0.01)


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("echo " + "x" * MAX_COMMAND_BYTES, f"the command is {MAX_COMMAND_BYTES + 5} bytes long; the limit is"),
        ("echo a\0b", "the command contains a NUL byte"),
        ("echo \ud800", "the command is not valid UTF-8 text"),
    ],
)
async def test_a_command_that_cannot_run_is_a_clear_failed_result(tmp_path: Path, command: str, reason: str) -> None:
    class Substitute(AgentExtension):
        """Hands bash the command as it is: the runtime has already cleaned what the model sent."""

        async def on_tool_call(self, context: Any, call: ToolCall, call_next: Any) -> ToolResult:
            result: ToolResult = await call_next(attrs.evolve(call, arguments={"command": command}))
            return result

    model = ScriptedModel([asks(call("b", "bash", command="true")), AssistantMessage("ok")])
    client = await create_agent(model, extensions=[BashExtension(tmp_path, timeout=5), Substitute()])
    await client.run("run it")
    message = next(m for m in client.agent.history.load("default") if isinstance(m, ToolMessage))
    assert message.status is ToolStatus.FAILED
    assert message.content.startswith(reason)
    assert "nothing was run" in message.content
    assert "ExceptionGroup" not in message.content


async def test_one_agent_runs_at_most_max_concurrent_commands_at_once(tmp_path: Path) -> None:
    (tmp_path / "running").mkdir()
    wait_for_go = "f=$(mktemp running/XXXXXX); while [ ! -e go ]; do sleep 0.02; done; rm $f"
    calls = [call(f"b{n}", "bash", command=wait_for_go) for n in range(6)]
    model = ScriptedModel([asks(*calls), AssistantMessage("done")])
    client = await create_agent(model, extensions=[BashExtension(tmp_path, timeout=60, max_concurrent=2)])
    seen: list[int] = []

    async def watch() -> None:
        with trio.fail_after(30):
            while len(list((tmp_path / "running").iterdir())) < 2:
                await trio.sleep(0.02)
        for _ in range(25):  # half a second in which more would have started if unbounded
            seen.append(len(list((tmp_path / "running").iterdir())))
            await trio.sleep(0.02)
        (tmp_path / "go").touch()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await client.run("six at once")
    assert max(seen) == 2
    results = [m for m in client.agent.history.load("default") if isinstance(m, ToolMessage)]
    assert [(m.status, m.content) for m in results] == [(ToolStatus.SUCCEEDED, "exit code: 0\n")] * 6
    assert MAX_CONCURRENT == 8


async def test_signal_deaths_are_reported(tmp_path: Path) -> None:
    result = await BashRunner(tmp_path, sandbox=FULL).run("kill -9 $$")
    assert result.content.startswith("exit code: -9 (killed by signal 9)")


def test_settings_are_checked_and_definitions_shared(tmp_path: Path) -> None:
    assert bash_tool(tmp_path) is bash_tool(os.fspath(tmp_path))
    assert bash_tool(tmp_path) is not bash_tool(tmp_path, timeout=1)
    with pytest.raises(ValueError):
        BashRunner(tmp_path, timeout=0)
    with pytest.raises(ValueError):
        BashRunner(tmp_path, max_concurrent=0)
    with pytest.raises(NotADirectoryError):
        BashRunner(tmp_path / "missing")


async def test_extension_offers_bash_to_the_model(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("one\ntwo\n")
    model = ScriptedModel([asks(call("b1", "bash", command="wc -l < data.txt")), AssistantMessage("two lines")])
    client = await create_agent(model, extensions=[BashExtension(tmp_path, timeout=5)])
    await client.run("count")
    assert [d.name for d in model.requests[0].tools] == ["bash"]
    message = next(m for m in client.agent.history.load("default") if isinstance(m, ToolMessage))
    assert (message.status, message.content) == (ToolStatus.SUCCEEDED, "exit code: 0\n2\n")

"""The bash tool: working directory, exit code, output cap and timeout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
from support import asks, call

from orchestrator import AssistantMessage, ScriptedModel, ToolMessage, ToolStatus, create_agent
from orchestrator.extensions.bash import LINGERED, BashExtension, BashRunner, bash_tool


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
    result = await BashRunner(tmp_path, timeout=0.5).run("sleep 30 & echo $!; sleep 30")
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
    result = await BashRunner(tmp_path, timeout=10).run("sleep 30 & echo $!; echo done; exit 4")
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


async def test_signal_deaths_are_reported(tmp_path: Path) -> None:
    result = await BashRunner(tmp_path).run("kill -9 $$")
    assert result.content.startswith("exit code: -9 (killed by signal 9)")


def test_settings_are_checked_and_definitions_shared(tmp_path: Path) -> None:
    assert bash_tool(tmp_path) is bash_tool(os.fspath(tmp_path))
    assert bash_tool(tmp_path) is not bash_tool(tmp_path, timeout=1)
    with pytest.raises(ValueError):
        BashRunner(tmp_path, timeout=0)
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

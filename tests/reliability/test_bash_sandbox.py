"""The bash tool in its bwrap sandbox: what a command can write and reach, its processes, and life without bwrap.

Every confined test runs the real ``bwrap`` and skips, saying why, where there is none that works.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from support import asks, call

from orchestrator import AgentRunConfig, AssistantMessage, ExternalEvent, ScriptedModel, ToolMessage, create_agent
from orchestrator.events import AgentEvent
from orchestrator.extensions.files.bash import BashExtension, BashRunner, bash_tool
from orchestrator.extensions.files.filesystem import FilesystemExtension
from orchestrator.extensions.files.sandbox import (
    DEFAULT_SANDBOX,
    SANDBOX_LEVELS,
    Sandbox,
    SandboxUnavailable,
    find_bwrap,
)
from orchestrator.extensions.tool_approval import ToolApprovalExtension

BWRAP = find_bwrap()
needs_bwrap = pytest.mark.skipif(BWRAP.path is None, reason=f"no working bwrap: {BWRAP.problem}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace beneath /tmp, so that it must show through the sandbox's private /tmp."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the workspace and outside /tmp (which the sandbox replaces)."""
    folder = Path(tempfile.mkdtemp(prefix="bash-sandbox-", dir="/var/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sleeping(marker: str) -> list[int]:
    """Host process ids of live ``sleep MARKER`` processes, seen through /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(") ", 1)[1][0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if argv[:2] == [b"sleep", marker.encode()] and state not in "ZX":
            found.append(int(entry.name))
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A sleep duration no other process uses, to find the sleeps a test started; any left are killed after it."""
    value = f"{1000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**9:09d}"
    yield value
    for pid in sleeping(value):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# the value -------------------------------------------------------------------------------


def test_an_unknown_level_is_refused_naming_the_levels() -> None:
    with pytest.raises(ValueError, match="unknown sandbox level 'loose'; use one of read-only, workspace-write, full"):
        Sandbox("loose")  # type: ignore[arg-type]
    assert SANDBOX_LEVELS == ("read-only", "workspace-write", "full")
    assert Sandbox("workspace-write", network=False) == DEFAULT_SANDBOX
    assert BashRunner(".").sandbox == DEFAULT_SANDBOX


def test_without_bwrap_a_confining_command_line_is_refused(tmp_path: Path) -> None:
    missing = Sandbox(bwrap=str(tmp_path / "no-bwrap"))
    assert missing.problem() == f"{str(tmp_path / 'no-bwrap')!r} was not found (install bubblewrap)"
    with pytest.raises(SandboxUnavailable) as caught:
        missing.command_line(["bash", "-c", "true"], tmp_path)
    assert (caught.value.level, caught.value.reason) == ("workspace-write", missing.problem())
    full = Sandbox("full", bwrap=str(tmp_path / "no-bwrap"))
    assert full.problem() is None
    assert full.command_line(["bash", "-c", "true"], tmp_path) == ["bash", "-c", "true"]


@needs_bwrap
def test_the_tool_description_says_what_the_sandbox_allows(workspace: Path) -> None:
    assert bash_tool(workspace).description.endswith(
        "bytes. It runs in a sandbox: only the workspace and a private, empty /tmp are writable; there is no network."
    )
    assert bash_tool(workspace, sandbox=Sandbox("read-only", network=True)).description.endswith(
        "bytes. It runs in a read-only sandbox: only a private, empty /tmp is writable; the network is reachable."
    )
    assert bash_tool(workspace, sandbox=Sandbox("full")).description.endswith("bytes.")


# what a confined command can write -------------------------------------------------------------


@needs_bwrap
async def test_the_workspace_is_writable_and_everything_else_is_not(workspace: Path, outside: Path) -> None:
    runner = BashRunner(workspace, timeout=20)
    result = await runner.run(f"pwd; echo in > inside.txt && echo wrote; echo out > {outside}/escaped.txt")
    first, where, wrote, refused = result.content.splitlines()
    assert (first, where, wrote) == ("exit code: 1", str(workspace), "wrote")
    assert "Read-only file system" in refused
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert not (outside / "escaped.txt").exists()


@needs_bwrap
async def test_the_read_only_level_refuses_a_workspace_write(workspace: Path) -> None:
    (workspace / "kept.txt").write_text("as it was\n")
    runner = BashRunner(workspace, timeout=20, sandbox=Sandbox("read-only"))
    result = await runner.run("cat kept.txt; echo changed > kept.txt; echo new > new.txt")
    first, kept, *refusals = result.content.splitlines()
    assert (first, kept) == ("exit code: 1", "as it was")
    assert len(refusals) == 2 and all("Read-only file system" in line for line in refusals)
    assert (workspace / "kept.txt").read_text() == "as it was\n"
    assert not (workspace / "new.txt").exists()


@needs_bwrap
async def test_tmp_inside_is_private(workspace: Path) -> None:
    name = f"sandbox-{uuid.uuid4().hex}"
    host_file = Path("/tmp") / f"{name}-host"
    host_file.write_text("host\n")
    try:
        result = await BashRunner(workspace, timeout=20).run(
            f"echo private > /tmp/{name}; cat /tmp/{name}; test -e {host_file} && echo host-visible || echo host-hidden"
        )
    finally:
        host_file.unlink()
    assert result.content == "exit code: 0\nprivate\nhost-hidden\n"
    assert not (Path("/tmp") / name).exists()


# what a confined command can reach -------------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize(("network", "reached"), [(False, False), (True, True)])
async def test_the_network_is_cut_unless_allowed(workspace: Path, network: bool, reached: bool) -> None:
    accepted: list[str] = []

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append("connection")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        runner = BashRunner(workspace, timeout=20, sandbox=Sandbox(network=network))
        result = await runner.run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
        if reached:
            with trio.fail_after(5):
                while not accepted:
                    await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    if reached:
        assert result.content == "exit code: 0\nconnected\n"
        assert accepted == ["connection"]
    else:
        assert result.content.startswith("exit code: 1\n")
        assert "Connection refused" in result.content
        assert accepted == []


# processes ------------------------------------------------------------------------------------


@needs_bwrap
async def test_the_timeout_kills_every_sandboxed_process(workspace: Path, marker: str) -> None:
    runner = BashRunner(workspace, timeout=3)
    outcome: list[Any] = []

    async def run() -> None:
        outcome.append(await runner.run(f"setsid sleep {marker} >/dev/null 2>&1 & sleep {marker}"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(10):
            while len(sleeping(marker)) < 2:  # both sleeps run, one of them outside the shell's process group
                await trio.sleep(0.01)
    [result] = outcome
    assert result.status == "failed"
    assert result.content.startswith("timed out after 3s; the command was killed")
    with trio.fail_after(5):
        while sleeping(marker):
            await trio.sleep(0.01)


@needs_bwrap
async def test_no_sandboxed_process_outlives_the_shell(workspace: Path, marker: str) -> None:
    # The shell waits until the job runs sleep, so it has left the shell's process group (setsid) by then.
    result = await BashRunner(workspace, timeout=20).run(
        f"setsid sleep {marker} >/dev/null 2>&1 & until grep -q sleep /proc/$!/cmdline; do sleep 0.01; done; "
        "echo started"
    )
    assert result.content == "exit code: 0\nstarted\n"
    with trio.fail_after(5):
        while sleeping(marker):
            await trio.sleep(0.01)


@needs_bwrap
async def test_a_signal_death_inside_reads_as_128_plus_the_signal(workspace: Path) -> None:
    result = await BashRunner(workspace, timeout=20).run("kill -9 $$")
    assert result.content == "exit code: 137\n"


# the filesystem tools at the read-only level ------------------------------------------------------


async def test_the_filesystem_extension_at_read_only_refuses_writes_and_reads(workspace: Path) -> None:
    (workspace / "kept.txt").write_text("as it was\n")
    model = ScriptedModel(
        [
            asks(
                call("r", "read_file", path="kept.txt"),
                call("w", "write_file", path="new.txt", content="x"),
                call("e", "edit_file", path="kept.txt", old_text="was", new_text="is"),
            ),
            AssistantMessage("done"),
        ]
    )
    files = FilesystemExtension(workspace, sandbox=Sandbox("read-only", bwrap="/no/such/bwrap"))
    client = await create_agent(model, extensions=[files])
    await client.run("look")
    results = {m.tool_call_id: m for m in client.agent.history.load("default") if isinstance(m, ToolMessage)}
    assert (results["r"].status.value, results["r"].content) == ("succeeded", "as it was\n")
    for call_id, path in (("w", "new.txt"), ("e", "kept.txt")):
        assert results[call_id].status.value == "failed"
        assert f"the workspace is read-only (sandbox level read-only); {path!r} was not written" in str(
            results[call_id].content
        )
    assert (workspace / "kept.txt").read_text() == "as it was\n"
    assert not (workspace / "new.txt").exists()


# without bwrap ---------------------------------------------------------------------------------


async def drive(client: Any, text: str, answers: list[bool]) -> list[AgentEvent]:
    """One request of session "s"; each tool_approval event gets the next answer."""
    events: list[AgentEvent] = []
    config = AgentRunConfig("s")
    with trio.fail_after(30):
        async for event in client.stream(text, config=config):
            events.append(event)
            if event.name == "tool_approval":
                reply = {"tool_call_id": event.payload["tool_call_id"], "approved": answers.pop(0)}
                client.agent.emit_external_event(ExternalEvent(event.payload["response_event"], reply), config=config)
    return events


async def test_without_bwrap_the_agent_says_so_once_and_approval_still_applies(
    tmp_path: Path, workspace: Path, outside: Path
) -> None:
    missing = Sandbox(bwrap=str(tmp_path / "no-bwrap"))
    declined, approved = outside / "declined.txt", outside / "approved.txt"
    model = ScriptedModel(
        [
            asks(call("b1", "bash", command=f"echo x > {declined}")),
            AssistantMessage("declined"),
            asks(call("b2", "bash", command=f"echo x > {approved}")),
            AssistantMessage("ran"),
        ]
    )
    approvals = ToolApprovalExtension({"bash": "ask"})
    client = await create_agent(model, extensions=[BashExtension(workspace, timeout=20, sandbox=missing), approvals])
    first = await drive(client, "one", [False])
    second = await drive(client, "two", [True])

    said = [e for e in first + second if e.name == "sandbox_unavailable"]
    assert [dict(e.payload) for e in said] == [{"level": "workspace-write", "reason": missing.problem()}]
    names = [e.name for e in first]
    assert names.index("sandbox_unavailable") < names.index("tool_approval")  # told before being asked
    assert [e.name for e in first + second].count("tool_approval") == 2
    assert not declined.exists()  # declined: nothing ran
    assert approved.read_text() == "x\n"  # approved: it ran, unconfined, as the event said it would
    [description] = [d.description for d in model.requests[0].tools if d.name == "bash"]
    assert "sandbox" not in description

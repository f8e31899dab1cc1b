"""The bash tool: run one shell command in a working directory under trio.

The command runs as ``bash -c`` in its own process group with the root as
working directory, stdin closed and stderr merged into stdout. Only the first
``max_output`` bytes of output are kept (the rest is counted and dropped);
after ``timeout`` seconds the whole process group is killed. The result comes
when the shell exits, and then every process left in its process group is
killed, so no background job started with ``&`` outlives the call (one that
left the group, e.g. through ``setsid``, is not). Jobs still holding the output
open get ``LINGER_SECONDS`` to finish writing first, and the result says they
were killed. A command longer than MAX_COMMAND_BYTES, or holding a NUL byte or
text that is not UTF-8, is a failed result and nothing runs. At most
``max_concurrent`` commands of one agent run at once; the others wait for a
slot (their timeout starts when they run).

``sandbox`` (``orchestrator.extensions.files.sandbox``) confines the command with
bwrap; the default, ``workspace-write``, lets it write only the workspace and a
private /tmp, without network. Inside the sandbox the command's processes have
their own PID namespace, so every one of them, also one that left the process
group, dies when the shell exits, and a signal death reads as exit code 128+N,
as in a shell. Where no working bwrap exists, a confining level cannot be
enforced: the command runs unconfined, the tool's description says nothing of a
sandbox, and the agent emits one ``sandbox_unavailable`` event saying why. At
``full`` the working directory is a starting point, not a sandbox.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import attrs
import trio

from orchestrator.events import AgentEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.files.filesystem import resolve_root
from orchestrator.extensions.files.sandbox import DEFAULT_SANDBOX, Sandbox
from orchestrator.tools import ToolDefinition, ToolResult, build_tool

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext, AgentView


LINGER_SECONDS = 0.5
"""How long output may keep arriving after the shell exits before its process group is killed."""
LINGERED = "the command exited but background processes kept its output open; its process group was killed"
MAX_COMMAND_BYTES = 100_000
"""Longest command accepted, in UTF-8 bytes (below Linux's 128 KiB limit on one argument)."""
MAX_CONCURRENT = 8
"""Default number of bash commands one agent runs at the same time."""


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class SandboxUnavailableEvent(AgentEvent):
    """bash runs its commands unconfined because its sandbox level cannot be enforced here; ``reason`` says why.

    An agent emits it once, in the first request that offers or runs such a bash
    tool; the approval policy applies to the commands as before.
    """

    kind: ClassVar[str] = "sandbox_unavailable"
    level: Literal["read-only", "workspace-write"]
    reason: str


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def command_problem(command: str) -> str | None:
    """Why ``command`` cannot be run, or None."""
    if "\0" in command:
        return "the command contains a NUL byte; nothing was run"
    try:
        size = len(command.encode("utf-8"))
    except UnicodeEncodeError:
        return "the command is not valid UTF-8 text (it holds a lone surrogate); nothing was run"
    if size > MAX_COMMAND_BYTES:
        return f"the command is {size} bytes long; the limit is {MAX_COMMAND_BYTES}; nothing was run"
    return None


async def _until_exit(process: trio.Process) -> None:
    """Return once the shell has exited, without reaping it where the OS allows.

    An unreaped shell keeps its process id, so the group id cannot be reused
    by an unrelated process before its group is killed.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        await process.wait()
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)


@attrs.frozen
class BashRunner:
    """How commands run: where, for how long, how much output is kept, how many at once, and how confined."""

    root: Path = attrs.field(converter=resolve_root)
    timeout: float = 30.0
    max_output: int = 30_000
    max_concurrent: int = MAX_CONCURRENT
    sandbox: Sandbox = attrs.field(default=DEFAULT_SANDBOX, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.timeout <= 0 or self.max_output < 0 or self.max_concurrent < 1:
            raise ValueError("timeout must be positive, max_output not negative and max_concurrent at least 1")

    async def run(self, command: str) -> ToolResult:
        """Run ``command``; the result text starts with its exit code (or the timeout).

        The result is reported once the shell exits, not once its output closes:
        a background job still holding the output gets ``LINGER_SECONDS`` to
        finish writing; then the process group is killed (always, whether or
        not anything held the output) and the result says so when output was held.
        """
        problem = command_problem(command)
        if problem is not None:
            return ToolResult(problem, "failed")
        argv = ["bash", "-c", command]
        if self.confined:
            argv = self.sandbox.command_line(argv, self.root)
        try:
            process = await trio.lowlevel.open_process(
                argv,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:
            return ToolResult(f"could not start {argv[0]}: {error}", "failed")
        try:
            return await self._supervise(process)
        finally:
            _kill_group(process.pid)
            with trio.CancelScope(shield=True):
                await process.wait()
                if process.stdout is not None:
                    await process.stdout.aclose()

    @property
    def confined(self) -> bool:
        """Whether commands run in the sandbox: a confining level, and a working bwrap to enforce it."""
        return self.sandbox.confines and self.sandbox.problem() is None

    async def _supervise(self, process: trio.Process) -> ToolResult:
        kept = bytearray()
        dropped = 0
        exited = lingered = False
        drained = trio.Event()

        async def read(stream: trio.abc.ReceiveStream) -> None:
            nonlocal kept, dropped
            async for chunk in stream:
                room = max(self.max_output - len(kept), 0)
                kept += chunk[:room]
                dropped += len(chunk) - min(room, len(chunk))
            drained.set()

        assert process.stdout is not None
        with trio.move_on_after(self.timeout) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, process.stdout)
                await _until_exit(process)
                exited = True
                with trio.move_on_after(LINGER_SECONDS):
                    await drained.wait()
                lingered = not drained.is_set()
                _kill_group(process.pid)
                with trio.move_on_after(LINGER_SECONDS):
                    await drained.wait()
                nursery.cancel_scope.cancel()
        output = kept.decode("utf-8", errors="replace")
        if dropped:
            output += f"\n[output truncated: {dropped} more bytes]"
        if scope.cancelled_caught and not exited:
            _kill_group(process.pid)
            return ToolResult(f"timed out after {self.timeout:g}s; the command was killed\n{output}", "failed")
        if lingered or (scope.cancelled_caught and not drained.is_set()):
            output += f"\n[{LINGERED}]"
        _kill_group(process.pid)
        with trio.CancelScope(shield=True):
            code = await process.wait()
        status = f"exit code: {code}" + (f" (killed by signal {-code})" if code < 0 else "")
        return ToolResult(f"{status}\n{output}")


_slots: weakref.WeakKeyDictionary[AgentView, dict[BashRunner, trio.CapacityLimiter]] = weakref.WeakKeyDictionary()
_told: weakref.WeakKeyDictionary[AgentView, set[Sandbox]] = weakref.WeakKeyDictionary()


async def say_if_unconfined(context: AgentRunContext, sandbox: Sandbox) -> None:
    """Emit SandboxUnavailableEvent when ``sandbox`` confines but cannot be enforced; once per agent and sandbox."""
    reason = sandbox.problem()
    if sandbox.level == "full" or reason is None:
        return
    told = _told.setdefault(context.agent, set())
    if sandbox not in told:
        told.add(sandbox)
        await context.emit(SandboxUnavailableEvent(level=sandbox.level, reason=reason))


def _slots_for(agent: AgentView, runner: BashRunner) -> trio.CapacityLimiter:
    """The limiter that bounds how many of ``agent``'s commands ``runner`` runs at once."""
    per_agent = _slots.setdefault(agent, {})
    limiter = per_agent.get(runner)
    if limiter is None:
        limiter = per_agent[runner] = trio.CapacityLimiter(runner.max_concurrent)
    return limiter


@functools.cache
def _tool(runner: BashRunner) -> ToolDefinition:
    async def bash(command: str, context: AgentRunContext) -> ToolResult:
        """Run a bash command.

        Args:
            command: the command line, run with bash -c
        """
        await say_if_unconfined(context, runner.sandbox)
        async with _slots_for(context.agent, runner):
            return await runner.run(command)

    description = (
        f"Run a bash command in the workspace root (killed after {runner.timeout:g}s). "
        f"Reports the exit code and the combined stdout and stderr, cut to {runner.max_output} bytes."
    )
    if runner.confined:
        description += " " + runner.sandbox.summary()
    return build_tool(bash, description=description)


def bash_tool(
    root: str | os.PathLike[str] = ".",
    *,
    timeout: float = 30.0,
    max_output: int = 30_000,
    max_concurrent: int = MAX_CONCURRENT,
    sandbox: Sandbox = DEFAULT_SANDBOX,
) -> ToolDefinition:
    """The ``bash(command)`` tool for ``root``; the same settings give the same definition."""
    return _tool(BashRunner(root, timeout, max_output, max_concurrent, sandbox=sandbox))


class BashExtension(AgentExtension):
    """Offer the ``bash`` tool, running commands in ``root``, confined as ``sandbox`` says."""

    def __init__(
        self,
        root: str | os.PathLike[str] = ".",
        *,
        timeout: float = 30.0,
        max_output: int = 30_000,
        max_concurrent: int = MAX_CONCURRENT,
        sandbox: Sandbox = DEFAULT_SANDBOX,
    ) -> None:
        self.sandbox = sandbox
        self.tool = bash_tool(
            root, timeout=timeout, max_output=max_output, max_concurrent=max_concurrent, sandbox=sandbox
        )

    async def on_tool(self, context: AgentRunContext) -> None:
        context.register_tool(self.tool)
        await say_if_unconfined(context, self.sandbox)

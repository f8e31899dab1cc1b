"""The bash tool: run one shell command in a working directory under trio.

The command runs as ``bash -c`` in its own process group with the root as
working directory, stdin closed and stderr merged into stdout. Only the first
``max_output`` bytes of output are kept (the rest is counted and dropped);
after ``timeout`` seconds the whole process group is killed. The result comes
when the shell exits: background jobs that still hold its output open
``LINGER_SECONDS`` later are killed with their process group, so none outlives
the call (one that left the group, e.g. through ``setsid``, is not). The working
directory is a starting point, not a sandbox: the command can reach whatever
the process may reach.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.filesystem import resolve_root
from orchestrator.tools import ToolDefinition, ToolResult, build_tool

if TYPE_CHECKING:
    from orchestrator.context import AgentRunContext


LINGER_SECONDS = 0.5
"""How long output may keep arriving after the shell exits before its process group is killed."""
LINGERED = "the command exited but background processes kept its output open; its process group was killed"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _deliver_cancel(process: trio.Process) -> None:
    _kill_group(process.pid)


@attrs.frozen
class BashRunner:
    """How commands run: where, for how long, and how much output is kept."""

    root: Path = attrs.field(converter=resolve_root)
    timeout: float = 30.0
    max_output: int = 30_000

    def __attrs_post_init__(self) -> None:
        if self.timeout <= 0 or self.max_output < 0:
            raise ValueError("timeout must be positive and max_output not negative")

    async def run(self, command: str) -> ToolResult:
        """Run ``command``; the result text starts with its exit code (or the timeout).

        The result is reported once the shell exits, not once its output closes: a
        background job still holding the output gets ``LINGER_SECONDS`` to finish
        writing, then the process group is killed and the result says so.
        """
        kept = bytearray()
        dropped = 0
        process: trio.Process | None = None
        exited = False
        lingered = False
        drained = trio.Event()

        async def read(stream: trio.abc.ReceiveStream) -> None:
            nonlocal kept, dropped
            async with stream:
                async for chunk in stream:
                    room = max(self.max_output - len(kept), 0)
                    kept += chunk[:room]
                    dropped += len(chunk) - min(room, len(chunk))
            drained.set()

        with trio.move_on_after(self.timeout) as scope:
            async with trio.open_nursery() as nursery:
                process = await nursery.start(
                    functools.partial(
                        trio.run_process,
                        ["bash", "-c", command],
                        cwd=self.root,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        check=False,
                        start_new_session=True,
                        deliver_cancel=_deliver_cancel,
                    )
                )
                assert process.stdout is not None
                nursery.start_soon(read, process.stdout)
                await process.wait()
                exited = True
                with trio.move_on_after(LINGER_SECONDS):
                    await drained.wait()
                if not drained.is_set():
                    lingered = True
                    _kill_group(process.pid)
                    with trio.move_on_after(LINGER_SECONDS):
                        await drained.wait()
                    nursery.cancel_scope.cancel()
        output = kept.decode("utf-8", errors="replace")
        if dropped:
            output += f"\n[output truncated: {dropped} more bytes]"
        if scope.cancelled_caught:
            lingered = lingered or (exited and not drained.is_set())
            if process is not None:
                _kill_group(process.pid)
            if not exited:
                return ToolResult(f"timed out after {self.timeout:g}s; the command was killed\n{output}", "failed")
        assert process is not None
        if lingered:
            output += f"\n[{LINGERED}]"
        code = process.returncode
        status = f"exit code: {code}" + (f" (killed by signal {-code})" if code is not None and code < 0 else "")
        return ToolResult(f"{status}\n{output}")


@functools.cache
def _tool(runner: BashRunner) -> ToolDefinition:
    async def bash(command: str) -> ToolResult:
        """Run a bash command.

        Args:
            command: the command line, run with bash -c
        """
        return await runner.run(command)

    description = (
        f"Run a bash command in the workspace root (killed after {runner.timeout:g}s). "
        f"Reports the exit code and the combined stdout and stderr, cut to {runner.max_output} bytes."
    )
    return build_tool(bash, description=description)


def bash_tool(root: str | os.PathLike[str] = ".", *, timeout: float = 30.0, max_output: int = 30_000) -> ToolDefinition:
    """The ``bash(command)`` tool for ``root``; the same settings give the same definition."""
    return _tool(BashRunner(root, timeout, max_output))


class BashExtension(AgentExtension):
    """Offer the ``bash`` tool, running commands in ``root``."""

    def __init__(self, root: str | os.PathLike[str] = ".", *, timeout: float = 30.0, max_output: int = 30_000) -> None:
        self.tool = bash_tool(root, timeout=timeout, max_output=max_output)

    async def on_tool(self, context: AgentRunContext) -> None:
        context.register_tool(self.tool)

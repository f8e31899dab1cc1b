"""The bash tool: run one shell command in a working directory under trio.

The command runs as ``bash -c`` in its own process group with the root as
working directory, stdin closed and stderr merged into stdout. Only the first
``max_output`` bytes of output are kept (the rest is counted and dropped);
after ``timeout`` seconds the whole process group is killed. The working
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
        """Run ``command``; the result text starts with its exit code (or the timeout)."""
        kept = bytearray()
        dropped = 0
        process: trio.Process | None = None
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
                async for chunk in process.stdout:
                    room = max(self.max_output - len(kept), 0)
                    kept += chunk[:room]
                    dropped += len(chunk) - min(room, len(chunk))
        output = kept.decode("utf-8", errors="replace")
        if dropped:
            output += f"\n[output truncated: {dropped} more bytes]"
        if scope.cancelled_caught:
            if process is not None:
                _kill_group(process.pid)
            return ToolResult(f"timed out after {self.timeout:g}s; the command was killed\n{output}", "failed")
        assert process is not None
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

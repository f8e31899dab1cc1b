"""Sandbox levels for the bash tool, and the bubblewrap (``bwrap``) command line that enforces them.

``read-only``: the whole filesystem is read-only, the workspace too. ``workspace-write``: the
workspace is writable and the rest read-only. At both levels ``/tmp`` is a private, empty tmpfs,
the command has no network (only its own loopback) unless ``network=True``, its processes live
in their own PID namespace (they cannot see or signal anything outside it, and all of them die
with the shell) and it holds no capabilities. ``full`` runs the command unconfined.

Whether a working ``bwrap`` exists is checked once per program name (found on PATH, then run
once with the namespaces the sandbox uses). Without one a confining level cannot be enforced:
``Sandbox.problem`` says why and ``Sandbox.command_line`` refuses; the caller decides, openly,
what to do instead.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

import attrs

SandboxLevel = Literal["read-only", "workspace-write", "full"]
SANDBOX_LEVELS: tuple[str, ...] = get_args(SandboxLevel)
DEFAULT_LEVEL: SandboxLevel = "workspace-write"
_PROBE_SECONDS = 10.0


class SandboxUnavailable(RuntimeError):
    """A confining level was asked for, but no working bwrap can enforce it."""

    def __init__(self, level: str, reason: str) -> None:
        super().__init__(f"the sandbox level {level!r} cannot be enforced: {reason}")
        self.level = level
        self.reason = reason


@attrs.frozen
class BwrapCheck:
    """What looking for a working bwrap found: its absolute path, or why there is none."""

    path: str | None
    problem: str = ""


def _namespace_options(network: bool) -> list[str]:
    options = ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--cap-drop", "ALL"]
    return options if network else [*options, "--unshare-net"]


@functools.cache
def find_bwrap(program: str = "bwrap") -> BwrapCheck:
    """Look up ``program`` (a name on PATH or a path) once, and run it once to see that it can sandbox here."""
    path = shutil.which(program)
    if path is None:
        return BwrapCheck(None, f"{program!r} was not found (install bubblewrap)")
    probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *_namespace_options(False), "true"]
    try:
        done = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, timeout=_PROBE_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return BwrapCheck(None, f"{path} could not be run: {error}")
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        return BwrapCheck(None, f"{path} cannot create a sandbox here: {why}")
    return BwrapCheck(os.path.abspath(path))


def _known_level(instance: Sandbox, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in SANDBOX_LEVELS:
        raise ValueError(f"unknown sandbox level {value!r}; use one of {', '.join(SANDBOX_LEVELS)}")


@attrs.frozen
class Sandbox:
    """How far a command is confined: ``level``, whether it keeps the network, and which bwrap enforces it."""

    level: SandboxLevel = attrs.field(default=DEFAULT_LEVEL, validator=_known_level)
    network: bool = False
    bwrap: str = attrs.field(default="bwrap", kw_only=True)

    @property
    def confines(self) -> bool:
        """Whether this level asks for confinement (every level but ``full``)."""
        return self.level != "full"

    def problem(self) -> str | None:
        """Why this level cannot be enforced here, or None (also for ``full``, which needs nothing)."""
        if not self.confines:
            return None
        check = find_bwrap(self.bwrap)
        return None if check.path is not None else check.problem

    def command_line(self, argv: Sequence[str], workspace: Path) -> list[str]:
        """``argv`` run confined at this level with ``workspace`` (an absolute path) as working directory.

        ``full`` gives ``argv`` unchanged; a confining level without a working bwrap
        raises SandboxUnavailable rather than run anything unconfined.
        """
        if not self.confines:
            return list(argv)
        check = find_bwrap(self.bwrap)
        if check.path is None:
            raise SandboxUnavailable(self.level, check.problem)
        where = os.fspath(workspace)
        mount = "--bind" if self.level == "workspace-write" else "--ro-bind"
        # The workspace is mounted after the tmpfs on /tmp, so that a workspace beneath /tmp shows through it.
        return [
            check.path,
            *("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"),
            *(mount, where, where),
            *_namespace_options(self.network),
            *("--chdir", where, "--"),
            *argv,
        ]

    def summary(self) -> str:
        """One sentence on what a command confined at this level can reach (empty for ``full``)."""
        if not self.confines:
            return ""
        if self.level == "workspace-write":
            files = "It runs in a sandbox: only the workspace and a private, empty /tmp are writable"
        else:
            files = "It runs in a read-only sandbox: only a private, empty /tmp is writable"
        return f"{files}; {'the network is reachable' if self.network else 'there is no network'}."


DEFAULT_SANDBOX = Sandbox()
"""``workspace-write`` without network, enforced by ``bwrap`` from PATH."""

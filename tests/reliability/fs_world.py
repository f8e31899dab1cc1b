"""What the filesystem reliability tests share: the outside secret, a snapshot, one attempt."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.extensions.files.confine import openat2_works
from orchestrator.extensions.files.filesystem import Workspace

SECRET = "secret value"


def state(folder: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every entry below ``folder`` with its mode, mtime and content (or link target)."""
    seen: dict[str, tuple[int, int, bytes | str]] = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            content: bytes | str = os.readlink(path)
        elif stat.S_ISREG(info.st_mode):
            content = path.read_bytes()
        else:
            content = b""
        seen[str(path.relative_to(folder))] = (info.st_mode, info.st_mtime_ns, content)
    return seen


def attempt(call: Callable[[Workspace], Any], workspace: Workspace) -> tuple[bool, str]:
    try:
        return True, str(call(workspace))
    except (OSError, ValueError) as problem:  # what the runtime turns into a failed tool result
        return False, f"{type(problem).__name__}: {problem}"


def resolver(request: pytest.FixtureRequest) -> bool:
    """Whether a test parametrized over ``openat2``/``walk`` uses openat2 (skipped where it is missing)."""
    if request.param == "openat2" and not openat2_works():
        pytest.skip("this kernel has no usable openat2; the component walk is tested on its own")
    return bool(request.param == "openat2")

"""A directory swapped for a symlink while the filesystem tools run never lets them out.

The tools work on ``inside/...``; the swap exchanges the directory ``inside``
with ``decoy``, a symlink to the outside folder, in one atomic step
(``renameat2(RENAME_EXCHANGE)``). Two tests: one swaps at a chosen moment of
each call (from an audit hook, at the Nth file open or directory listing the
call makes), so every moment between checking a path and using it is hit
deterministically; the other swaps from a thread, as fast as it can, for
RACE_SECONDS while the tools run in a loop. Either way no result may hold the
outside secret (or list the outside folder) and nothing outside may change.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fs_world import SECRET, attempt, resolver, state

from orchestrator.extensions.files.filesystem import Workspace

RACE_SECONDS = 1.0
"""How long the threaded race runs for each resolver."""

_SWAP_EVENTS = frozenset({"open", "os.scandir", "os.listdir"})
_armed: dict[str, Any] = {}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event not in _SWAP_EVENTS or not _armed or threading.get_ident() != _armed["thread"]:
        return
    _armed["seen"] += 1
    if _armed["seen"] == _armed["at"]:
        exchange(_armed["root"])


sys.addaudithook(_audit)

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(root: Path) -> None:
    """Swap the names ``inside`` and ``decoy`` atomically (two renames where the OS cannot)."""
    inside, decoy = bytes(root / "inside"), bytes(root / "decoy")
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is not None and renameat2(_AT_FDCWD, inside, _AT_FDCWD, decoy, _RENAME_EXCHANGE) == 0:
        return
    parked = root / "parked"
    os.rename(root / "inside", parked)
    os.rename(root / "decoy", root / "inside")
    os.rename(parked, root / "decoy")


@contextmanager
def swap_at(root: Path, at: int) -> Iterator[None]:
    """Exchange ``inside`` and ``decoy`` when this thread makes its ``at``-th open or listing."""
    _armed.update(thread=threading.get_ident(), seen=0, at=at, root=root)
    try:
        yield
    finally:
        _armed.clear()


@pytest.fixture(params=["openat2", "walk"])
def use_openat2(request: pytest.FixtureRequest) -> bool:
    return resolver(request)


@pytest.fixture
def swap_world(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "inside").mkdir(parents=True)
    outside.mkdir()
    (root / "inside" / "secret.txt").write_text("inside\n")
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "only-outside.txt").write_text("x\n")
    (root / "decoy").symlink_to(outside)
    return root, outside


OPERATIONS: dict[str, Callable[[Workspace], Any]] = {
    "read_file": lambda w: w.read_file("inside/secret.txt"),
    "write_file": lambda w: w.write_file("inside/secret.txt", "inside\n"),
    "create_file": lambda w: w.write_file("inside/new/created.txt", "inside\n"),
    "edit_file": lambda w: w.edit_file("inside/secret.txt", "inside", "inside"),
    "list_files": lambda w: w.list_files("inside"),
    "grep": lambda w: w.grep("secret|inside|value", "inside"),
    "grep_file": lambda w: w.grep("value", "inside/secret.txt"),
    "glob": lambda w: w.glob("inside/**"),
}


def leaked(text: str) -> bool:
    return SECRET in text or "only-outside" in text


@pytest.mark.parametrize("at", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_swap_at_any_moment_of_a_call_reaches_nothing_outside(
    swap_world: tuple[Path, Path], use_openat2: bool, operation: str, at: int
) -> None:
    root, outside = swap_world
    workspace = Workspace(root, use_openat2=use_openat2)
    before = state(outside)
    with swap_at(root, at):
        _, text = attempt(OPERATIONS[operation], workspace)
    assert not leaked(text), text
    assert state(outside) == before
    text.encode("utf-8")


def test_a_directory_swapped_by_another_thread_while_tools_run(
    swap_world: tuple[Path, Path], use_openat2: bool
) -> None:
    root, outside = swap_world
    workspace = Workspace(root, use_openat2=use_openat2)
    before = state(outside)
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            exchange(root)

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    calls = 0
    leaks: list[tuple[str, str]] = []
    try:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            for name, operation in OPERATIONS.items():
                _, text = attempt(operation, workspace)
                calls += 1
                if leaked(text):
                    leaks.append((name, text))
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert calls >= len(OPERATIONS)
    assert leaks == []
    assert state(outside) == before

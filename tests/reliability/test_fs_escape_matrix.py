"""Every filesystem tool against every way out of the root, with both resolvers.

Each case names a path (or a glob pattern) that tries to leave the root; every
tool is called with it. Whatever each call returns, nothing outside the root
is read (its secret never shows up in a result) and nothing outside changes
(names, contents, modes and modification times are compared), and every
result encodes as UTF-8. Reads, writes and edits of these paths all fail;
listing and searching a parent folder succeed without showing what leads
outside. Hard links are the documented exception for reads: a hard link is
the file itself, so reading one inside the root reads it (writes are refused).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fs_world import SECRET, attempt, resolver, state

from orchestrator.extensions.files.filesystem import PathOutsideRoot, Workspace, filesystem_tools
from orchestrator.extensions.files.write import HardLinkRefused
from orchestrator.extensions.plan_mode import PlanModeExtension


@pytest.fixture(params=["openat2", "walk"])
def use_openat2(request: pytest.FixtureRequest) -> bool:
    return resolver(request)


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """A root holding every kind of trap, and an outside folder with a secret and a FIFO."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    os.mkfifo(outside / "fifo")
    (root / "plain.txt").write_text("plain\n")
    os.mkfifo(root / "inner_fifo")
    (root / "sub").mkdir()
    links = {
        "file_link": outside / "secret.txt",
        "relative_file_link": Path("../outside/secret.txt"),
        "dir_link": outside,
        "relative_dir_link": Path("../outside"),
        "dangling": outside / "created-by-a-tool.txt",
        "loop_a": Path("loop_b"),
        "loop_b": Path("loop_a"),
        "self_loop": Path("self_loop"),
        "fifo_link": outside / "fifo",
        "inner_fifo_link": Path("inner_fifo"),
        "device_link": Path("/dev/zero"),
        "null_link": Path("/dev/null"),
        "sub/up_link": Path("../../outside"),
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    os.link(outside / "secret.txt", root / "hard_link.txt")
    return root, outside


# path, and whether reading it must fail (writes and edits always must)
PATH_CASES: dict[str, str] = {
    "dotdot": "../outside/secret.txt",
    "dotdot_inside_first": "sub/../../outside/secret.txt",
    "absolute": "{outside}/secret.txt",
    "absolute_via_root": "{root}/../outside/secret.txt",
    "symlink_to_file": "file_link",
    "relative_symlink_to_file": "relative_file_link",
    "symlink_to_dir": "dir_link/secret.txt",
    "relative_symlink_to_dir": "relative_dir_link/secret.txt",
    "symlink_in_subdir": "sub/up_link/secret.txt",
    "dangling_symlink": "dangling",
    "looping_symlinks": "loop_a",
    "self_loop": "self_loop/x",
    "fifo_through_symlink": "fifo_link",
    "inner_fifo_through_symlink": "inner_fifo_link",
    "device_through_symlink": "device_link",
    "null_device_through_symlink": "null_link",
    "nul_byte": "plain.txt\0../../outside/secret.txt",
    "over_long_path": "a/" * 3000 + "x",
    "over_long_name": "n" * 300,
    "lone_surrogate": "plain\udc80.txt",
}
READABLE = {"hard_link"}  # documented: reads follow hard links


def tool_calls(path: str) -> dict[str, Callable[[Workspace], Any]]:
    folder = path.rsplit("/", 1)[0] if "/" in path else path
    return {
        "read_file": lambda w: w.read_file(path),
        "write_file": lambda w: w.write_file(path, "overwritten"),
        "write_file_below": lambda w: w.write_file(path + "/planted.txt", "planted"),
        "edit_file": lambda w: w.edit_file(path, "secret", "leaked"),
        "list_files": lambda w: w.list_files(path),
        "list_files_parent": lambda w: w.list_files(folder),
        "grep": lambda w: w.grep("secret", path),
        "grep_parent": lambda w: w.grep("secret", folder),
    }


@pytest.mark.parametrize("case", sorted([*PATH_CASES, "hard_link"]))
def test_no_tool_reads_or_writes_outside_the_root(world: tuple[Path, Path], use_openat2: bool, case: str) -> None:
    root, outside = world
    path = "hard_link.txt" if case == "hard_link" else PATH_CASES[case].format(root=root, outside=outside)
    workspace = Workspace(root, use_openat2=use_openat2)
    before = state(outside)
    outcomes = {name: attempt(call, workspace) for name, call in tool_calls(path).items()}
    assert state(outside) == before, outcomes
    for name, (ok, text) in outcomes.items():
        text.encode("utf-8")  # every result can be stored and sent
        if case in READABLE and name in ("read_file", "grep", "grep_parent", "list_files_parent"):
            continue
        assert SECRET not in text, (name, text)
        if name in ("read_file", "write_file", "edit_file", "write_file_below"):
            assert not ok, (name, text)


def test_hard_links_are_read_as_the_file_they_are_and_never_written_through(world: tuple[Path, Path]) -> None:
    root, outside = world
    workspace = Workspace(root)
    assert workspace.read_file("hard_link.txt") == SECRET + "\n"
    with pytest.raises(HardLinkRefused, match="2 hard links"):
        workspace.write_file("hard_link.txt", "overwritten")
    with pytest.raises(HardLinkRefused, match="refusing to write through it"):
        workspace.edit_file("hard_link.txt", "secret", "leaked")
    assert (outside / "secret.txt").read_text() == SECRET + "\n"
    assert os.stat(root / "hard_link.txt").st_ino == os.stat(outside / "secret.txt").st_ino


def test_fifos_and_devices_are_refused_without_blocking(world: tuple[Path, Path]) -> None:
    root, _ = world
    workspace = Workspace(root)
    for path in ("inner_fifo", "inner_fifo_link"):
        with pytest.raises(OSError, match="not a regular file"):
            workspace.read_file(path)
        with pytest.raises(OSError, match="not a regular file"):
            workspace.write_file(path, "x")
    for path in ("device_link", "null_link", "fifo_link"):
        with pytest.raises(PathOutsideRoot):
            workspace.read_file(path)


@pytest.mark.parametrize(
    "pattern",
    ["../*", "../outside/*", "/*", "{outside}/*", "dir_link/*", "relative_dir_link/**", "sub/up_link/*", "**"],
)
def test_glob_lists_nothing_outside_the_root(world: tuple[Path, Path], use_openat2: bool, pattern: str) -> None:
    root, outside = world
    workspace = Workspace(root, use_openat2=use_openat2)
    ok, text = attempt(lambda w: w.glob(pattern.format(outside=outside)), workspace)
    if pattern.startswith(("/", "..", "{")):
        assert not ok and "PathOutsideRoot" in text
    listed = text.splitlines() if ok else []
    assert not any(entry.startswith(("dir_link", "relative_dir_link", "file_link", "sub/up_link")) for entry in listed)
    assert not any("secret" in entry for entry in listed)


def test_walking_tools_skip_every_link_that_leaves_and_keep_those_that_stay(world: tuple[Path, Path]) -> None:
    root, _ = world
    (root / "notes.txt").write_text("a secret is kept here\n")
    (root / "notes_link").symlink_to("notes.txt")
    workspace = Workspace(root)
    everything = workspace.glob("**").splitlines()
    assert "notes_link" in everything and "plain.txt" in everything and "sub/" in everything
    for leaving in ("file_link", "relative_file_link", "dir_link", "relative_dir_link", "loop_a", "fifo_link"):
        assert leaving not in everything and leaving + "/" not in everything
    found = workspace.grep("secret").splitlines()
    # the hard link is the file itself (documented); nothing else outside is searched
    assert sorted(found) == [
        "hard_link.txt:1:secret value",
        "notes.txt:1:a secret is kept here",
        "notes_link:1:a secret is kept here",
    ]


def test_plan_modes_own_filesystem_tools_are_these_confined_tools(world: tuple[Path, Path]) -> None:
    root, _ = world
    own = {definition.name: definition for definition in PlanModeExtension(root=root).plan_tools}
    for definition in filesystem_tools(root):
        assert own[definition.name] is definition

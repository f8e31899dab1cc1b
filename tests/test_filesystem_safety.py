"""Filesystem tools: atomic writes, the edit size bound, and names that are not UTF-8."""

from __future__ import annotations

import os
import stat
import tracemalloc
from pathlib import Path

import pytest
from support import asks, call

from orchestrator import AssistantMessage, ScriptedModel, ToolMessage, ToolStatus, create_agent
from orchestrator.extensions.files.filesystem import MAX_EDIT_BYTES, FilesystemExtension, Workspace


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# atomic writes -----------------------------------------------------------------------


def test_content_that_cannot_be_encoded_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me\n")
    workspace = Workspace(tmp_path)
    with pytest.raises(ValueError, match=r"not valid UTF-8 text .* nothing was written"):
        workspace.write_file("notes.txt", "half \ud800 a pair")
    with pytest.raises(ValueError, match="new_text is not valid UTF-8"):
        workspace.edit_file("notes.txt", "keep", "\udcff")
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("failing", ["fsync", "write", "rename"])
def test_a_failure_while_writing_keeps_the_old_content_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    (tmp_path / "notes.txt").write_text("old content\n")
    workspace = Workspace(tmp_path)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, broken)
    with pytest.raises(OSError, match="No space left"):
        workspace.write_file("notes.txt", "new content that never fully lands\n")
    with pytest.raises(OSError, match="No space left"):
        workspace.edit_file("notes.txt", "old", "new")
    monkeypatch.undo()
    assert (tmp_path / "notes.txt").read_text() == "old content\n"
    assert leftovers(tmp_path) == []


def test_writes_replace_the_file_and_keep_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "script.sh"
    target.write_text("echo one\n")
    target.chmod(0o751)
    workspace = Workspace(tmp_path)
    with target.open() as original:
        assert workspace.write_file("script.sh", "echo two\n") == "wrote 9 characters to script.sh"
        # a new file was renamed over the old one: the old one was never truncated or rewritten
        assert original.read() == "echo one\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert workspace.edit_file("script.sh", "two", "three") == "replaced 1 occurrence in script.sh"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert target.read_text() == "echo three\n"
    assert leftovers(tmp_path) == []


def test_edit_file_refuses_files_above_its_limit_with_a_clear_reason(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("x" * 2000 + "needle")
    workspace = Workspace(tmp_path, max_edit_bytes=1000)
    with pytest.raises(ValueError, match=r"big\.txt is 2006 bytes; edit_file changes files up to 1000 bytes"):
        workspace.edit_file("big.txt", "needle", "pin")
    assert (tmp_path / "big.txt").read_text() == "x" * 2000 + "needle"
    assert Workspace(tmp_path).max_edit_bytes == MAX_EDIT_BYTES == 10_000_000


async def test_the_edit_limit_reaches_the_model_as_a_failed_result(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("y" * 50 + "needle")
    model = ScriptedModel(
        [asks(call("e", "edit_file", path="big.txt", old_text="needle", new_text="pin")), AssistantMessage("ok")]
    )
    client = await create_agent(model, extensions=[FilesystemExtension(tmp_path, max_edit_bytes=10)])
    await client.run("edit")
    message = next(m for m in client.agent.history.load("default") if isinstance(m, ToolMessage))
    assert message.status is ToolStatus.FAILED
    assert "edit_file changes files up to 10 bytes" in message.content


def test_edit_file_holds_about_twice_the_file_at_most(tmp_path: Path) -> None:
    size = 4_000_000
    (tmp_path / "large.txt").write_text("é" * (size // 2 - 3) + "needle")  # two bytes per character
    workspace = Workspace(tmp_path)
    tracemalloc.start()
    try:
        workspace.edit_file("large.txt", "needle", "pin")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tmp_path / "large.txt").read_bytes().endswith(b"pin")
    assert peak < 2.6 * size


def test_grep_says_which_files_were_too_large_to_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.extensions import filesystem

    monkeypatch.setattr(filesystem, "_GREP_MAX_BYTES", 20)
    (tmp_path / "small.txt").write_text("needle\n")
    (tmp_path / "large.txt").write_text("needle\n" * 10)
    workspace = Workspace(tmp_path)
    assert workspace.grep("needle").splitlines() == [
        "small.txt:1:needle",
        "[1 files larger than 20 bytes were not searched]",
    ]
    with pytest.raises(ValueError, match=r"large\.txt is larger than 20 bytes; not searched"):
        workspace.grep("needle", "large.txt")


def test_walks_say_how_many_directories_were_too_deep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.extensions import fs_walk

    monkeypatch.setattr(fs_walk, "MAX_DEPTH", 2)
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c" / "deep.txt").write_text("needle\n")
    (tmp_path / "a" / "top.txt").write_text("needle\n")
    workspace = Workspace(tmp_path)
    assert workspace.glob("**").splitlines() == [
        "a/",
        "a/b/",
        "a/top.txt",
        "[1 directories more than 2 levels deep were not searched]",
    ]
    assert workspace.grep("needle").splitlines() == [
        "a/top.txt:1:needle",
        "[1 directories more than 2 levels deep were not searched]",
    ]


# names that are not UTF-8 ----------------------------------------------------------


@pytest.fixture
def odd_names(tmp_path: Path) -> Path:
    folder = os.fsencode(tmp_path)
    with open(folder + b"/caf\xe9.txt", "wb") as handle:
        handle.write(b"menu\n")
    os.mkdir(folder + b"/dir\xff")
    with open(folder + b"/dir\xff/inner.txt", "wb") as handle:
        handle.write(b"menu inside\n")
    return tmp_path


def test_names_that_are_not_utf8_are_shown_cleaned(odd_names: Path) -> None:
    workspace = Workspace(odd_names)
    listed = workspace.list_files()
    assert listed.splitlines() == ["caf\ufffd.txt", "dir\ufffd/"]
    assert workspace.glob("**").splitlines() == ["dir\ufffd/", "caf\ufffd.txt", "dir\ufffd/inner.txt"]
    assert workspace.grep("menu").splitlines() == ["caf\ufffd.txt:1:menu", "dir\ufffd/inner.txt:1:menu inside"]
    assert workspace.grep("menu", include="*.txt").count("\n") == 1
    for text in (listed, workspace.glob("**"), workspace.grep("menu")):
        text.encode("utf-8")


async def test_a_listing_with_odd_names_is_a_history_that_can_be_stored(odd_names: Path) -> None:
    model = ScriptedModel([asks(call("l", "list_files"), call("g", "glob", pattern="*")), AssistantMessage("ok")])
    client = await create_agent(model, extensions=[FilesystemExtension(odd_names)])
    await client.run("list")
    for message in client.agent.history.load("default"):
        if isinstance(message, ToolMessage):
            assert message.status is ToolStatus.SUCCEEDED
            message.content.encode("utf-8")

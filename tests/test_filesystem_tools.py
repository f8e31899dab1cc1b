"""Filesystem tools: what they do inside the root, and that nothing escapes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import asks

from orchestrator import AssistantMessage, ScriptedModel, ToolCall, ToolMessage, ToolStatus, create_agent
from orchestrator.extensions.files.filesystem import FILESYSTEM_TOOL_NAMES, FilesystemExtension, filesystem_tools


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A root with files and a secret folder beside it, reachable only through symlinks."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "src" / "pkg").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("secret value\n")
    (root / "README.md").write_text("hello\nworld\n")
    (root / "src" / "main.py").write_text("def main():\n    return 1\n")
    (root / "src" / "pkg" / "util.py").write_text("def helper():\n    return 'x'\n")
    (root / "link_to_outside").symlink_to(outside, target_is_directory=True)
    (root / "link_to_secret").symlink_to(outside / "secret.txt")
    (root / "inner_link").symlink_to(root / "README.md")
    return root, outside


async def invoke(root: Path, name: str, *, max_results: int = 100, **arguments: Any) -> Any:
    definition = {d.name: d for d in filesystem_tools(root, max_chars=60, max_results=max_results)}[name]
    return await definition.invoke(arguments, {})


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir()}


# behaviour inside the root -----------------------------------------------------


async def test_read_write_and_offsets(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert await invoke(root, "read_file", path="README.md") == "hello\nworld\n"
    assert await invoke(root, "read_file", path="README.md", offset=2) == "world\n"
    assert await invoke(root, "read_file", path="README.md", offset=1, limit=1) == "hello\n"
    assert await invoke(root, "read_file", path="inner_link") == "hello\nworld\n"
    assert await invoke(root, "read_file", path=str(root / "README.md")) == "hello\nworld\n"
    assert await invoke(root, "write_file", path="new/deep/file.txt", content="abc") == (
        "wrote 3 characters to new/deep/file.txt"
    )
    assert (root / "new" / "deep" / "file.txt").read_text() == "abc"
    (root / "long.txt").write_text("x" * 100)
    capped = await invoke(root, "read_file", path="long.txt")
    assert capped.startswith("x" * 60 + "\n[truncated: 40 more characters")


async def test_read_file_counts_lines_longer_than_its_read_chunk_and_caps_without_losing_the_count(
    tmp_path: Path,
) -> None:
    (tmp_path / "big.txt").write_text("a" * 200_000 + "\n" + "second\r\nthird\n" + "z" * 150)
    assert await invoke(tmp_path, "read_file", path="big.txt", offset=2, limit=1) == "second\r\n"
    assert await invoke(tmp_path, "read_file", path="big.txt", offset=3) == "third\n" + "z" * 54 + (
        "\n[truncated: 96 more characters; read further with offset and limit]"
    )
    whole = await invoke(tmp_path, "read_file", path="big.txt")
    assert whole == "a" * 60 + "\n[truncated: 200105 more characters; read further with offset and limit]"


async def test_read_file_holds_no_more_than_its_cap_of_a_large_file(tmp_path: Path) -> None:
    import tracemalloc

    (tmp_path / "huge.txt").write_text(("y" * 99 + "\n") * 100_000)  # 10 MB
    tracemalloc.start()
    try:
        capped = await invoke(tmp_path, "read_file", path="huge.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert capped.endswith("[truncated: 9999940 more characters; read further with offset and limit]")
    assert peak < 2_000_000


async def test_edit_file_replaces_exactly_one_occurrence(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    (root / "crlf.txt").write_bytes(b"alpha\r\nbeta\r\nalpha beta\r\n")
    assert await invoke(root, "edit_file", path="crlf.txt", old_text="\nbeta\r\n", new_text="\ngamma\r\n") == (
        "replaced 1 occurrence in crlf.txt"
    )
    assert (root / "crlf.txt").read_bytes() == b"alpha\r\ngamma\r\nalpha beta\r\n"
    with pytest.raises(ValueError, match="occurs 2 times"):
        await invoke(root, "edit_file", path="crlf.txt", old_text="alpha", new_text="x")
    with pytest.raises(ValueError, match="not found"):
        await invoke(root, "edit_file", path="crlf.txt", old_text="delta", new_text="x")
    with pytest.raises(ValueError, match="must not be empty"):
        await invoke(root, "edit_file", path="crlf.txt", old_text="", new_text="x")
    assert (root / "crlf.txt").read_bytes() == b"alpha\r\ngamma\r\nalpha beta\r\n"
    (root / "latin.txt").write_bytes(b"caf\xe9")
    with pytest.raises(UnicodeDecodeError):
        await invoke(root, "edit_file", path="latin.txt", old_text="caf", new_text="tea")
    assert (root / "latin.txt").read_bytes() == b"caf\xe9"


async def test_list_glob_and_grep(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert (await invoke(root, "list_files")).splitlines() == [
        "README.md",
        "inner_link@",
        "link_to_outside@",
        "link_to_secret@",
        "src/",
    ]
    assert (await invoke(root, "list_files", path="src")).splitlines() == ["main.py", "pkg/"]
    assert (await invoke(root, "glob", pattern="**/*.py")).splitlines() == ["src/main.py", "src/pkg/util.py"]
    assert (await invoke(root, "glob", pattern="src/*")).splitlines() == ["src/pkg/", "src/main.py"]
    assert await invoke(root, "glob", pattern="*.rs") == "no matches"
    assert (await invoke(root, "grep", pattern=r"def \w+")).splitlines() == [
        "src/main.py:1:def main():",
        "src/pkg/util.py:1:def helper():",
    ]
    assert await invoke(root, "grep", pattern="return", include="util.py") == "src/pkg/util.py:2:    return 'x'"
    assert await invoke(root, "grep", pattern="world", path="README.md") == "README.md:2:world"
    with pytest.raises(ValueError, match="invalid regular expression"):
        await invoke(root, "grep", pattern="(")
    for index in range(5):
        (root / f"many{index}.txt").write_text("hit\n")
    many = await invoke(root, "grep", pattern="hit", max_results=3)
    assert many.splitlines()[-1] == "[truncated: more than 3 results; narrow the query]"
    assert len(many.splitlines()) == 4


def test_tools_are_shared_per_root_and_limits() -> None:
    root = Path.cwd()
    assert [d.name for d in filesystem_tools(root)] == list(FILESYSTEM_TOOL_NAMES)
    assert filesystem_tools(root)[0] is filesystem_tools(str(root) + "/.")[0]
    assert filesystem_tools(root)[0] is not filesystem_tools(root, max_chars=10)[0]
    with pytest.raises(NotADirectoryError):
        filesystem_tools(root / "no-such-folder")


# escapes -----------------------------------------------------------------------


def escape_calls(kind: str, outside: Path) -> list[ToolCall]:
    """One call of every tool that tries to reach ``outside`` in the way ``kind`` names."""
    file, folder, pattern = {
        "dotdot": ("../outside/secret.txt", "../outside", "../outside/*"),
        "absolute": (str(outside / "secret.txt"), str(outside), str(outside) + "/*"),
        "symlinked_file": ("link_to_secret", "link_to_secret", "link_to_secret"),
        "symlinked_folder": ("link_to_outside/secret.txt", "link_to_outside", "link_to_outside/*"),
    }[kind]
    new = str(Path(folder) / "planted.txt")
    return [
        ToolCall("read", "read_file", {"path": file}),
        ToolCall("write", "write_file", {"path": file, "content": "overwritten"}),
        ToolCall("create", "write_file", {"path": new, "content": "planted"}),
        ToolCall("edit", "edit_file", {"path": file, "old_text": "secret", "new_text": "leaked"}),
        ToolCall("list", "list_files", {"path": folder}),
        ToolCall("grep", "grep", {"pattern": "secret", "path": folder}),
        ToolCall("glob", "glob", {"pattern": pattern}),
    ]


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlinked_file", "symlinked_folder"])
async def test_no_tool_reaches_outside_the_root(layout: tuple[Path, Path], kind: str) -> None:
    root, outside = layout
    before = snapshot(outside)
    calls = escape_calls(kind, outside)
    model = ScriptedModel([asks(*calls), AssistantMessage("done")])
    client = await create_agent(model, extensions=[FilesystemExtension(root)])
    await client.run("try to escape")

    outcome = {m.tool_call_id: m for m in client.agent.history.load("default") if isinstance(m, ToolMessage)}
    assert set(outcome) == {c.id for c in calls}
    for call_id, message in outcome.items():
        assert "secret value" not in message.content
        if call_id == "glob" and kind.startswith("symlinked"):
            assert (message.status, message.content) == (ToolStatus.SUCCEEDED, "no matches")
        else:
            assert message.status is ToolStatus.FAILED, call_id
            assert "PathOutsideRoot" in message.content
            assert "outside the workspace root" in message.content
    assert snapshot(outside) == before


async def test_walking_tools_skip_symlinks_that_lead_outside(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    everything = (await invoke(root, "glob", pattern="**")).splitlines()
    assert "inner_link" in everything
    assert not any(entry.startswith(("link_to_outside", "link_to_secret")) for entry in everything)
    assert await invoke(root, "grep", pattern="secret") == "no matches"


async def test_nul_bytes_and_empty_paths_fail(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    with pytest.raises(ValueError, match="NUL"):
        await invoke(root, "read_file", path="README.md\0")
    with pytest.raises(ValueError, match="empty"):
        await invoke(root, "read_file", path="")
    with pytest.raises(IsADirectoryError):
        await invoke(root, "read_file", path="src")

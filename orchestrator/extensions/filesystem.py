"""Filesystem tools confined to one root directory.

Every path a tool receives is resolved (``..`` and symlinks included) before
anything is opened; a path that lands outside the root raises
``PathOutsideRoot`` inside the handler, which the runtime turns into a failed
tool result. Walking tools (``glob``, ``grep``) never descend into symlinked
directories (nor into ``.git``) and skip symlinked files that point outside
the root. Blocking I/O runs in a worker thread.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs
import trio

from orchestrator.extensions.base import AgentExtension
from orchestrator.tools import ToolDefinition, build_tool

if TYPE_CHECKING:
    from orchestrator.context import AgentRunContext

FILESYSTEM_TOOL_NAMES = ("read_file", "write_file", "edit_file", "list_files", "glob", "grep")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_GREP_MAX_BYTES = 5_000_000
_READ_CHUNK = 65_536
_SKIPPED_DIRS = frozenset({".git"})


class PathOutsideRoot(ValueError):
    """A tool path resolves outside the configured root."""


def resolve_root(value: str | os.PathLike[str]) -> Path:
    """``value`` as an absolute real path; NotADirectoryError unless it is a directory."""
    root = Path(value).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"workspace root {str(root)!r} is not a directory")
    return root


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob over ``/``-separated paths: ``*``, ``?``, ``[...]`` and ``**``."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            if body.startswith("^"):
                body = "\\" + body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


@attrs.frozen
class Workspace:
    """The root the tools work in, and the limits on what they return."""

    root: Path = attrs.field(converter=resolve_root)
    max_chars: int = 100_000
    max_results: int = 500

    # confinement ------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The real path ``path`` names, or PathOutsideRoot when it is not under the root."""
        if not path:
            raise ValueError("path must not be empty")
        if "\0" in path:
            raise ValueError("path must not contain NUL bytes")
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        resolved = Path(os.path.realpath(candidate))
        if not resolved.is_relative_to(self.root):
            raise PathOutsideRoot(f"{path!r} is outside the workspace root")
        return resolved

    def inside(self, path: Path) -> bool:
        return Path(os.path.realpath(path)).is_relative_to(self.root)

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."

    def _walk(self, top: Path) -> Iterator[tuple[Path, bool]]:
        """(path, is_dir) under ``top``, sorted, not following symlinked directories."""
        for current, dirs, files in os.walk(top, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
            base = Path(current)
            for name in dirs:
                yield base / name, True
            for name in sorted(files):
                yield base / name, False

    # file access ------------------------------------------------------------

    def _open(self, path: Path, errors: str = "replace") -> TextIO:
        """A regular file opened for reading text, never through a final symlink."""
        handle = os.fdopen(os.open(path, os.O_RDONLY | _NOFOLLOW), encoding="utf-8", errors=errors, newline="")
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            handle.close()
            raise IsADirectoryError(f"{self.relative(path)!r} is not a regular file")
        return handle

    def _read(self, path: Path, errors: str = "replace") -> str:
        with self._open(path, errors) as handle:
            return handle.read()

    def _write(self, path: Path, content: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | _NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise IsADirectoryError(f"{self.relative(path)!r} is not a regular file")
            handle.truncate()
            handle.write(content)

    def _cap(self, text: str, hint: str, more: int = 0) -> str:
        """``text`` cut to max_chars; ``more`` counts characters already left out."""
        hidden = max(len(text) - self.max_chars, 0) + more
        if hidden == 0:
            return text
        return f"{text[: self.max_chars]}\n[truncated: {hidden} more characters; {hint}]"

    # operations -------------------------------------------------------------

    def read_file(self, path: str, offset: int = 1, limit: int | None = None) -> str:
        if offset < 1 or (limit is not None and limit < 0):
            raise ValueError("offset must be at least 1 and limit not negative")
        end = None if limit is None else offset + limit
        kept: list[str] = []
        size = more = 0
        line = 1
        with self._open(self.resolve(path)) as handle:
            # Pieces of at most _READ_CHUNK characters: memory stays bounded by max_chars,
            # however large the file or its lines; what is past the cap is only counted.
            while (end is None or line < end) and (piece := handle.readline(_READ_CHUNK)):
                if line >= offset:
                    if size <= self.max_chars:
                        kept.append(piece)
                        size += len(piece)
                    else:
                        more += len(piece)
                if piece.endswith(("\n", "\r")):
                    line += 1
        return self._cap("".join(kept), "read further with offset and limit", more)

    def write_file(self, path: str, content: str) -> str:
        target = self.resolve(path)
        self._write(target, content)
        return f"wrote {len(content)} characters to {self.relative(target)}"

    def edit_file(self, path: str, old_text: str, new_text: str) -> str:
        if not old_text:
            raise ValueError("old_text must not be empty")
        target = self.resolve(path)
        text = self._read(target, errors="strict")
        count = text.count(old_text)
        if count == 0:
            raise ValueError(f"old_text was not found in {self.relative(target)}")
        if count > 1:
            raise ValueError(f"old_text occurs {count} times in {self.relative(target)}; make it unique")
        self._write(target, text.replace(old_text, new_text, 1))
        return f"replaced 1 occurrence in {self.relative(target)}"

    def list_files(self, path: str = ".") -> str:
        target = self.resolve(path)
        if not target.is_dir():
            raise NotADirectoryError(f"{path!r} is not a directory")
        rows: list[str] = []
        with os.scandir(target) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_symlink():
                    rows.append(entry.name + "@")
                elif entry.is_dir(follow_symlinks=False):
                    rows.append(entry.name + "/")
                else:
                    rows.append(entry.name)
        return self._limit(rows, "(empty directory)")

    def glob(self, pattern: str) -> str:
        parts = pattern.split("/")
        if not pattern or pattern.startswith("/") or ".." in parts:
            raise PathOutsideRoot(f"pattern {pattern!r} reaches outside the workspace root; use a relative pattern")
        regex = _glob_regex(pattern)
        rows: list[str] = []
        for path, is_dir in self._walk(self.root):
            relative = self.relative(path)
            if not regex.match(relative):
                continue
            if path.is_symlink() and not self.inside(path):
                continue
            rows.append(relative + "/" if is_dir else relative)
        return self._limit(rows, "no matches")

    def grep(self, pattern: str, path: str = ".", include: str | None = None) -> str:
        try:
            regex = re.compile(pattern)
        except re.error as problem:
            raise ValueError(f"invalid regular expression: {problem}") from None
        target = self.resolve(path)
        candidates = [target] if target.is_file() else [p for p, is_dir in self._walk(target) if not is_dir]
        name_filter = _glob_regex(include) if include else None
        by_path = include is not None and "/" in include
        rows: list[str] = []
        for file in candidates:
            relative = self.relative(file)
            if name_filter and not name_filter.match(relative if by_path else file.name):
                continue
            real = Path(os.path.realpath(file))
            if not real.is_relative_to(self.root):
                continue
            try:
                if real.stat().st_size > _GREP_MAX_BYTES:
                    continue
                text = self._read(real)
            except OSError:
                continue
            if "\0" in text[:8192]:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    rows.append(f"{relative}:{number}:{line[:500]}")
                    if len(rows) > self.max_results:
                        return self._limit(rows, "")
        return self._limit(rows, "no matches")

    def _limit(self, rows: list[str], empty: str) -> str:
        if not rows:
            return empty
        if len(rows) > self.max_results:
            shown = "\n".join(rows[: self.max_results])
            return f"{shown}\n[truncated: more than {self.max_results} results; narrow the query]"
        return self._cap("\n".join(rows), "narrow the query")


@functools.cache
def _tools(workspace: Workspace) -> tuple[ToolDefinition, ...]:
    run = trio.to_thread.run_sync

    async def read_file(path: str, offset: int = 1, limit: int | None = None) -> str:
        """Read a UTF-8 text file inside the workspace.

        Args:
            path: file path, relative to the workspace root
            offset: first line to return (1-based)
            limit: how many lines to return (all when omitted)
        """
        return await run(workspace.read_file, path, offset, limit)

    async def write_file(path: str, content: str) -> str:
        """Create or overwrite a text file inside the workspace (parent folders are created).

        Args:
            path: file path, relative to the workspace root
            content: the complete new content
        """
        return await run(workspace.write_file, path, content)

    async def edit_file(path: str, old_text: str, new_text: str) -> str:
        """Replace one exact occurrence of old_text with new_text; fails if it is missing or not unique.

        Args:
            path: file path, relative to the workspace root
            old_text: the exact text to replace, occurring exactly once
            new_text: the replacement text
        """
        return await run(workspace.edit_file, path, old_text, new_text)

    async def list_files(path: str = ".") -> str:
        """List one directory: folders end with '/', symlinks with '@'.

        Args:
            path: directory path, relative to the workspace root
        """
        return await run(workspace.list_files, path)

    async def glob(pattern: str) -> str:
        """Find paths matching a glob relative to the workspace root ('*', '?', '[...]', '**').

        Args:
            pattern: for example 'src/**/*.py'
        """
        return await run(workspace.glob, pattern)

    async def grep(pattern: str, path: str = ".", include: str | None = None) -> str:
        """Search file contents for a regular expression; prints path:line:text.

        Args:
            pattern: a Python regular expression
            path: file or directory to search, relative to the workspace root
            include: only search files whose name (or relative path, if it has a '/') matches this glob
        """
        return await run(workspace.grep, pattern, path, include)

    return tuple(build_tool(fn) for fn in (read_file, write_file, edit_file, list_files, glob, grep))


def filesystem_tools(
    root: str | os.PathLike[str] = ".", *, max_chars: int = 100_000, max_results: int = 500
) -> list[ToolDefinition]:
    """The filesystem tools for ``root``; the same root and limits give the same definitions."""
    return list(_tools(Workspace(root, max_chars, max_results)))


class FilesystemExtension(AgentExtension):
    """Offer read_file, write_file, edit_file, list_files, glob and grep, confined to ``root``."""

    def __init__(self, root: str | os.PathLike[str] = ".", *, max_chars: int = 100_000, max_results: int = 500) -> None:
        self.tools = filesystem_tools(root, max_chars=max_chars, max_results=max_results)

    async def on_tool(self, context: AgentRunContext) -> None:
        for definition in self.tools:
            context.register_tool(definition)

"""Filesystem tools confined to one root directory.

Paths are resolved beneath the root race-free (``fs_confine``): component by
component through directory descriptors, symlinks followed only while they
stay beneath the root, and every operation works on the descriptor that was
checked. A path that leads outside the root raises ``PathOutsideRoot`` inside
the handler, which the runtime turns into a failed tool result. Writes are
atomic (``fs_write``) and refuse files with more than one hard link; reads do
not check link counts (a hard link is the file itself). ``grep`` and ``glob``
match with RE2 (``fs_match``), in time linear in the text. Walking tools never
descend into symlinked directories (nor into ``.git``) and skip symlinks that
lead outside the root. File names are cleaned for display, so a name holding
bytes that are not UTF-8 shows them as U+FFFD. Blocking I/O runs in a worker
thread. At the sandbox level ``read-only`` write_file and edit_file refuse
every call (``WorkspaceReadOnly``); the other levels leave the tools as they are.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TextIO

import attrs
import trio

from orchestrator.checks import flag, path_like, whole
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.files.confine import Beneath, Located, PathOutsideRoot, open_directory, open_regular
from orchestrator.extensions.files.match import Matcher, compile_glob, compile_regex
from orchestrator.extensions.files.sandbox import DEFAULT_SANDBOX, Sandbox
from orchestrator.extensions.files.walk import Entry, Walk, display_name
from orchestrator.extensions.files.write import HardLinkRefused, read_for_edit, replace_file
from orchestrator.tools import ToolDefinition, build_tool

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

__all__ = [
    "FILESYSTEM_TOOL_NAMES",
    "MAX_EDIT_BYTES",
    "FilesystemExtension",
    "HardLinkRefused",
    "PathOutsideRoot",
    "Workspace",
    "WorkspaceReadOnly",
    "filesystem_tools",
    "resolve_root",
]

FILESYSTEM_TOOL_NAMES = ("read_file", "write_file", "edit_file", "list_files", "glob", "grep")

MAX_EDIT_BYTES = 10_000_000
"""Largest file edit_file changes; it holds about twice the file's size while it works."""
_GREP_MAX_BYTES = 5_000_000
_READ_CHUNK = 65_536


def resolve_root(value: str | os.PathLike[str]) -> Path:
    """``value`` as an absolute real path; NotADirectoryError unless it is a directory."""
    root = Path(value).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"workspace root {str(root)!r} is not a directory")
    return root


class WorkspaceReadOnly(PermissionError):
    """A write or edit asked of a workspace whose sandbox level is ``read-only``; nothing was written."""

    def __init__(self, path: str) -> None:
        super().__init__(f"the workspace is read-only (sandbox level read-only); {path!r} was not written")
        self.path = path


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid UTF-8 text (it holds a lone surrogate); nothing was written") from None


@attrs.frozen
class Workspace:
    """The root the tools work in, the limits on what they return, and whether they may change it."""

    root: Path = attrs.field(converter=resolve_root)
    max_chars: int = attrs.field(default=100_000, validator=whole(1))
    max_results: int = attrs.field(default=500, validator=whole(1))
    max_edit_bytes: int = attrs.field(default=MAX_EDIT_BYTES, validator=whole(1))
    use_openat2: bool = attrs.field(default=True, kw_only=True, validator=flag())
    writable: bool = attrs.field(default=True, kw_only=True, validator=flag())

    @property
    def beneath(self) -> Beneath:
        return Beneath(PurePosixPath(self.root), self.use_openat2)

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
        with self.beneath.locate(path) as place, self._text(place) as handle:
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
        if not self.writable:
            raise WorkspaceReadOnly(path)
        data = _encode(content, "content")
        with self.beneath.locate(path, create_parents=True) as place:
            replace_file(place, data)
            return f"wrote {len(content)} characters to {display_name(place.relative)}"

    def edit_file(self, path: str, old_text: str, new_text: str) -> str:
        if not self.writable:
            raise WorkspaceReadOnly(path)
        if not old_text:
            raise ValueError("old_text must not be empty")
        old, new = _encode(old_text, "old_text"), _encode(new_text, "new_text")
        with self.beneath.locate(path) as place:
            shown = display_name(place.relative)
            data = read_for_edit(place, self.max_edit_bytes)
            # UTF-8 is self-synchronising: counting and replacing bytes is counting and
            # replacing characters, without a decoded copy of the file.
            count = data.count(old)
            if count == 0:
                raise ValueError(f"old_text was not found in {shown}")
            if count > 1:
                raise ValueError(f"old_text occurs {count} times in {shown}; make it unique")
            replaced = data.replace(old, new, 1)
            del data
            replace_file(place, replaced)
            return f"replaced 1 occurrence in {shown}"

    def list_files(self, path: str = ".") -> str:
        rows: list[str] = []
        with self.beneath.directory(path) as (fd, _), os.scandir(fd) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                name = display_name(entry.name)
                if entry.is_symlink():
                    rows.append(name + "@")
                elif entry.is_dir(follow_symlinks=False):
                    rows.append(name + "/")
                else:
                    rows.append(name)
        return self._limit(rows, "(empty directory)")

    def glob(self, pattern: str) -> str:
        parts = pattern.split("/")
        if not pattern or pattern.startswith("/") or ".." in parts:
            raise PathOutsideRoot(f"pattern {pattern!r} reaches outside the workspace root; use a relative pattern")
        matcher = compile_glob(pattern)
        rows: list[str] = []
        walk = Walk()
        with self.beneath.root_fd() as root:
            for entry in walk.entries(root):
                if not matcher.fullmatch(entry.shown):
                    continue
                kind = self._link_kind(entry) if entry.kind == "link" else entry.kind
                if kind is not None:
                    rows.append(entry.shown + "/" if kind == "dir" else entry.shown)
        return self._limit(rows, "no matches", walk)

    def _link_kind(self, entry: Entry) -> str | None:
        """What a symlink met by a walk leads to beneath the root, or None when it leaves it."""
        try:
            with self.beneath.locate(entry.raw_path) as place:
                mode = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return "file"
        except (OSError, ValueError):
            return None
        return "dir" if stat.S_ISDIR(mode) else "file"

    def grep(self, pattern: str, path: str = ".", include: str | None = None) -> str:
        regex = compile_regex(pattern)
        name_filter = compile_glob(include) if include else None
        by_path = include is not None and "/" in include
        rows: list[str] = []
        walk = Walk()
        too_large = 0
        with self.beneath.locate(path) as place:
            mode = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(mode):
                shown = display_name(place.relative)
                if not self._grep_file(regex, place, shown, rows):
                    raise ValueError(f"{shown} is larger than {_GREP_MAX_BYTES} bytes; not searched")
                return self._limit(rows, "no matches")
            folder = open_directory(place)
            try:
                prefix = "" if place.relative == "." else place.relative + "/"
                for entry in walk.entries(folder, prefix, display_name(prefix)):
                    if entry.kind == "dir":
                        continue
                    if name_filter and not name_filter.fullmatch(entry.shown if by_path else display_name(entry.name)):
                        continue
                    if entry.kind == "link":
                        searched = self._grep_link(regex, entry, rows)
                    else:
                        place = Located(entry.dir_fd, entry.name, entry.shown)
                        searched = self._grep_file(regex, place, entry.shown, rows)
                    too_large += not searched
                    if len(rows) > self.max_results:
                        break
            finally:
                os.close(folder)
        note = f"\n[{too_large} files larger than {_GREP_MAX_BYTES} bytes were not searched]" if too_large else ""
        return self._limit(rows, "no matches", walk) + note

    def _grep_link(self, regex: Matcher, entry: Entry, rows: list[str]) -> bool:
        try:
            with self.beneath.locate(entry.raw_path) as place:
                return self._grep_file(regex, place, entry.shown, rows)
        except (OSError, ValueError):
            return True  # leads outside the root, dangles or loops: not searched, by design

    def _grep_file(self, regex: Matcher, place: Located, shown: str, rows: list[str]) -> bool:
        """Append the matching lines of one file; False when it was too large to search.

        Files that are not regular, cannot be opened or look binary (a NUL byte in
        their first 8 KiB) are skipped as grep does.
        """
        try:
            fd, status = open_regular(place)
        except OSError:
            return True
        with os.fdopen(fd, "rb") as handle:
            if status.st_size > _GREP_MAX_BYTES:
                return False
            data = handle.read(_GREP_MAX_BYTES + 1)
        if len(data) > _GREP_MAX_BYTES:
            return False
        if b"\0" in data[:8192]:
            return True
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
            if regex.search(line):
                rows.append(f"{shown}:{number}:{line[:500]}")
                if len(rows) > self.max_results:
                    break
        return True

    @contextlib.contextmanager
    def _text(self, place: Located) -> Iterator[TextIO]:
        fd, _ = open_regular(place)
        with os.fdopen(fd, encoding="utf-8", errors="replace", newline="") as handle:
            yield handle

    def _limit(self, rows: list[str], empty: str, walk: Walk | None = None) -> str:
        note = ""
        if walk is not None and walk.too_deep:
            note = f"\n[{walk.too_deep} directories more than {walk.max_depth} levels deep were not searched]"
        if not rows:
            return empty + note
        if len(rows) > self.max_results:
            shown = "\n".join(rows[: self.max_results])
            return f"{shown}\n[truncated: more than {self.max_results} results; narrow the query]{note}"
        return self._cap("\n".join(rows), "narrow the query") + note


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

        Files larger than the edit limit are refused; replace those whole with write_file.

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
            pattern: a regular expression in RE2 syntax (Python's, without backreferences or lookaround)
            path: file or directory to search, relative to the workspace root
            include: only search files whose name (or relative path, if it has a '/') matches this glob
        """
        return await run(workspace.grep, pattern, path, include)

    return tuple(build_tool(fn) for fn in (read_file, write_file, edit_file, list_files, glob, grep))


def filesystem_tools(
    root: str | os.PathLike[str] = ".",
    *,
    max_chars: int = 100_000,
    max_results: int = 500,
    max_edit_bytes: int = MAX_EDIT_BYTES,
    sandbox: Sandbox = DEFAULT_SANDBOX,
) -> list[ToolDefinition]:
    """The filesystem tools for ``root``; the same root, limits and sandbox level give the same definitions."""
    writable = sandbox.level != "read-only"
    return list(_tools(Workspace(root, max_chars, max_results, max_edit_bytes, writable=writable)))


class FilesystemExtension(AgentExtension):
    """Offer read_file, write_file, edit_file, list_files, glob and grep, confined to ``root``.

    At the sandbox level ``read-only`` write_file and edit_file are offered but refuse every call (so
    that no other extension's same-named tool, such as Plan Mode's, stands in for them).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] = ".",
        *,
        max_chars: int = 100_000,
        max_results: int = 500,
        max_edit_bytes: int = MAX_EDIT_BYTES,
        sandbox: Sandbox = DEFAULT_SANDBOX,
    ) -> None:
        path_like().check("FilesystemExtension.root", root)
        whole(1).check("FilesystemExtension.max_chars", max_chars)
        whole(1).check("FilesystemExtension.max_results", max_results)
        whole(1).check("FilesystemExtension.max_edit_bytes", max_edit_bytes)
        if not isinstance(sandbox, Sandbox):
            raise TypeError(f"FilesystemExtension.sandbox must be a Sandbox, not {type(sandbox).__name__}")
        self.tools = filesystem_tools(
            root, max_chars=max_chars, max_results=max_results, max_edit_bytes=max_edit_bytes, sandbox=sandbox
        )

    async def on_tool(self, context: AgentRunContext) -> None:
        for definition in self.tools:
            context.register_tool(definition)

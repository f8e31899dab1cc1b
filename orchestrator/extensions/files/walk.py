"""Walking a directory tree through descriptors, never through names that could be swapped.

Each directory is listed through a descriptor and each subdirectory opened
relative to it with ``O_NOFOLLOW``: a directory replaced by a symlink while
the walk runs is skipped, not followed. Symlinks are reported as links, never
descended. Names are cleaned (``clean_text``) for display; the raw name is
kept to open the entry.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Literal

import attrs

from orchestrator.text import clean_text

MAX_DEPTH = 128
"""Directory levels a walk descends; deeper directories are counted, not listed."""

Kind = Literal["dir", "file", "link"]
_SUBDIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@attrs.frozen
class Entry:
    """One entry met by a walk; ``dir_fd`` is valid only until the walk moves on."""

    dir_fd: int
    name: str
    raw_path: str
    shown: str
    kind: Kind


def display_name(name: str) -> str:
    """A file name as text that always encodes as UTF-8 (undecodable bytes become U+FFFD)."""
    return clean_text(name)


def _kind(entry: os.DirEntry[str]) -> Kind:
    try:
        if entry.is_symlink():
            return "link"
        return "dir" if entry.is_dir(follow_symlinks=False) else "file"
    except OSError:
        return "file"


@attrs.define
class Walk:
    """Entries beneath a directory, parents' entries before their children's.

    Within a directory, subdirectories come first, then everything else, each
    in name order. ``skip`` names directories not entered; ``too_deep`` counts
    directories deeper than ``max_depth`` levels that were not entered.
    """

    skip: frozenset[str] = frozenset({".git"})
    too_deep: int = 0
    max_depth: int = attrs.field(factory=lambda: MAX_DEPTH)

    def entries(self, dir_fd: int, raw_prefix: str = "", shown_prefix: str = "") -> Iterator[Entry]:
        yield from self._level(dir_fd, raw_prefix, shown_prefix, 0)

    def _level(self, dir_fd: int, raw_prefix: str, shown_prefix: str, depth: int) -> Iterator[Entry]:
        try:
            with os.scandir(dir_fd) as listing:
                found = sorted(((entry.name, _kind(entry)) for entry in listing), key=lambda item: item[0])
        except OSError:
            return
        folders = [name for name, kind in found if kind == "dir" and name not in self.skip]
        for name, kind in [*((n, k) for n, k in found if k == "dir"), *((n, k) for n, k in found if k != "dir")]:
            if kind == "dir" and name in self.skip:
                continue
            yield Entry(dir_fd, name, raw_prefix + name, shown_prefix + display_name(name), kind)
        for name in folders:
            if depth + 1 >= self.max_depth:
                self.too_deep += 1
                continue
            try:
                child = os.open(name, _SUBDIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # gone, or swapped for a symlink or a file since it was listed
            try:
                yield from self._level(child, f"{raw_prefix}{name}/", f"{shown_prefix}{display_name(name)}/", depth + 1)
            finally:
                with contextlib.suppress(OSError):
                    os.close(child)

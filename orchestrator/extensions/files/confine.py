"""Open paths beneath a root directory without a gap between check and use.

A path is never checked and then opened again by name. Resolution starts at a
file descriptor of the root and opens one component at a time, relative to the
directory opened before it, with ``O_NOFOLLOW``: a symlink is read
(``readlinkat``) and its target resolved the same way, beneath the root (an
absolute target must name a path under the root; ``..`` never climbs above
it). The caller then operates on the descriptor that was checked, or on a name
relative to the directory descriptor that was checked. Where the kernel offers
``openat2`` with ``RESOLVE_BENEATH`` (Linux 5.6+), it opens the directories in
one call; whatever it refuses (an absolute symlink, a race it detected) is
resolved again component by component.

What this guards against: any other process changing the workspace while a
tool runs (swapping a directory for a symlink, retargeting a symlink) cannot
make a tool open anything outside the root. What it does not: a directory that
is moved out of the root while a call already holds it open stays open to
that call (the fallback walk keeps its chain of descriptors); the root itself
is trusted.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import functools
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import attrs

from orchestrator.text import clean_text

MAX_PATH_BYTES = 4096
"""Longest path a tool accepts, in UTF-8 bytes (Linux's PATH_MAX)."""
MAX_SYMLINKS = 40
"""Symlinks followed while resolving one path; more is ELOOP, as in the kernel."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW = os.O_NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08


class PathOutsideRoot(ValueError):
    """A tool path resolves outside the configured root."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@functools.cache
def _syscall() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return function


def openat2_beneath(dir_fd: int, path: str, flags: int) -> int:
    """``openat2(dir_fd, path, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)``.

    OSError(ENOSYS) where the kernel or the platform has no openat2.
    """
    function = _syscall()
    if function is None:
        raise OSError(errno.ENOSYS, "openat2 is not available", path)
    how = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    fd = function(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


@functools.cache
def openat2_works() -> bool:
    """Whether this kernel answers openat2 (seccomp filters may refuse it with EPERM or ENOSYS)."""
    top = os.open("/", _DIR_FLAGS)
    try:
        os.close(openat2_beneath(top, ".", _DIR_FLAGS))
    except OSError:
        return False
    finally:
        os.close(top)
    return True


def split_path(path: str, root: PurePosixPath) -> list[str]:
    """The components of ``path`` relative to ``root``, ``.`` and empty ones dropped.

    ValueError for an empty path, a NUL byte, text that is not valid UTF-8 or a path
    longer than MAX_PATH_BYTES; PathOutsideRoot for an absolute path not under the root.
    """
    if not path:
        raise ValueError("path must not be empty")
    if "\0" in path:
        raise ValueError("path must not contain NUL bytes")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("path is not valid UTF-8 text (it holds a lone surrogate)") from None
    if size > MAX_PATH_BYTES:
        raise ValueError(f"path is {size} bytes long; the limit is {MAX_PATH_BYTES}")
    if path.startswith("/"):
        absolute = PurePosixPath(path)
        if not absolute.is_relative_to(root):
            raise PathOutsideRoot(f"{path!r} is outside the workspace root")
        path = absolute.relative_to(root).as_posix()
    return [part for part in path.split("/") if part not in ("", ".")]


@attrs.frozen
class Located:
    """A name in a directory reached beneath the root; the name is not a symlink.

    ``dir_fd`` belongs to the context that produced it. ``relative`` is the real
    path from the root (symlinks followed), cleaned to encode as UTF-8, for messages.
    """

    dir_fd: int
    name: str
    relative: str


@attrs.frozen
class Beneath:
    """A root directory, and race-free resolution of paths beneath it."""

    root: PurePosixPath
    use_openat2: bool = True

    @contextlib.contextmanager
    def root_fd(self) -> Iterator[int]:
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def directory(self, path: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """A descriptor of the directory ``path`` names, and its real relative path."""
        with self._walk(split_path(path, self.root), final=False, create=create) as (fd, names, _):
            yield fd, clean_text("/".join(names)) or "."

    @contextlib.contextmanager
    def locate(self, path: str, *, create_parents: bool = False) -> Iterator[Located]:
        """Where ``path`` leads: a directory's descriptor and a name in it that is not a
        symlink (it may not exist yet). Symlinks, the last one included, are followed
        beneath the root. A path naming the root, or ending in ``..``, gives the name ``.``
        (the directory itself)."""
        with self._walk(split_path(path, self.root), final=True, create=create_parents) as (fd, names, last):
            if last is None:
                yield Located(fd, ".", clean_text("/".join(names)) or ".")
            else:
                yield Located(fd, last, clean_text("/".join([*names, last])))

    # resolution ---------------------------------------------------------------

    @contextlib.contextmanager
    def _walk(self, parts: list[str], *, final: bool, create: bool) -> Iterator[tuple[int, list[str], str | None]]:
        fast = self._fast(parts, final=final) if self.use_openat2 and openat2_works() else None
        if fast is not None:
            fd, names, last = fast
            try:
                yield fd, names, last
            finally:
                os.close(fd)
            return
        stack: list[int] = []
        try:
            stack.append(os.open(self.root, _DIR_FLAGS))
            names, last = self._descend(stack, parts, final=final, create=create)
            yield stack[-1], names, last
        finally:
            for fd in stack:
                os.close(fd)

    def _fast(self, parts: list[str], *, final: bool) -> tuple[int, list[str], str | None] | None:
        """openat2 for the directories when the result needs no user-space walk, else None."""
        if ".." in parts or not parts:
            return None
        folders, last = (parts[:-1], parts[-1]) if final else (parts, None)
        with self.root_fd() as root:
            try:
                fd = openat2_beneath(root, "/".join(folders) or ".", _DIR_FLAGS)
            except OSError:
                return None  # missing, refused or raced: the walk says precisely what
        if last is not None:
            try:
                is_link = stat.S_ISLNK(os.stat(last, dir_fd=fd, follow_symlinks=False).st_mode)
            except FileNotFoundError:
                is_link = False
            except OSError:
                is_link = True
            if is_link:
                os.close(fd)
                return None
        # openat2 may have followed symlinks: the names are the real ones only without them.
        with contextlib.suppress(OSError):
            if self._has_symlink(folders):
                os.close(fd)
                return None
        return fd, folders, last

    def _has_symlink(self, folders: list[str]) -> bool:
        """Whether any prefix of ``folders`` is a symlink (only for the names in messages)."""
        prefix = PurePosixPath(self.root)
        for part in folders:
            prefix /= part
            if os.path.islink(prefix):
                return True
        return False

    def _descend(
        self, stack: list[int], parts: list[str], *, final: bool, create: bool
    ) -> tuple[list[str], str | None]:
        pending = collections.deque(parts)
        names: list[str] = []
        links = created = 0
        while pending:
            part = pending.popleft()
            if part == "..":
                if len(stack) == 1:
                    raise PathOutsideRoot(f"{'/'.join([*names, *parts])!r} is outside the workspace root")
                os.close(stack.pop())
                names.pop()
                if final and not pending:
                    return names, None
                continue
            if final and not pending:
                try:
                    mode = os.stat(part, dir_fd=stack[-1], follow_symlinks=False).st_mode
                except FileNotFoundError:
                    return names, part
                if not stat.S_ISLNK(mode):
                    return names, part
            else:
                try:
                    stack.append(os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=stack[-1]))
                    names.append(part)
                    continue
                except FileNotFoundError:
                    created += 1
                    if not create or created > len(parts) + MAX_SYMLINKS:
                        raise  # not asked to create, or something keeps removing what was created
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, dir_fd=stack[-1])
                    pending.appendleft(part)
                    continue
                except OSError as problem:
                    if problem.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
            links += 1
            if links > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", "/".join([*names, part]))
            try:
                target = os.readlink(part, dir_fd=stack[-1])
            except OSError as problem:
                if problem.errno == errno.EINVAL:
                    raise NotADirectoryError(f"{'/'.join([*names, part])!r} is not a directory") from None
                raise
            pending.extendleft(reversed(self._target_parts(target, stack, names)))
        return names, None

    def _target_parts(self, target: str, stack: list[int], names: list[str]) -> list[str]:
        """The components a symlink's target adds; an absolute one restarts at the root."""
        if not target.startswith("/"):
            return [part for part in target.split("/") if part not in ("", ".")]
        absolute = PurePosixPath(target)
        if not absolute.is_relative_to(self.root):
            raise PathOutsideRoot(f"a symlink leads to {target!r}, outside the workspace root")
        while len(stack) > 1:
            os.close(stack.pop())
        names.clear()
        return [part for part in absolute.relative_to(self.root).parts if part not in ("", ".")]


# operating on what was checked ----------------------------------------------------------


def open_regular(place: Located) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file at ``place``, and its status.

    The entry is examined without following or opening it first, so a FIFO or a
    device is refused without being opened; the descriptor is then checked to be
    that same file.
    """
    before = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
    require_regular(before, place.relative)
    fd = os.open(place.name, _READ_FLAGS, dir_fd=place.dir_fd)
    try:
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise OSError(errno.EAGAIN, "the file changed while it was opened; try again", place.relative)
        return fd, after
    except BaseException:
        os.close(fd)
        raise


def require_regular(status: os.stat_result, relative: str) -> None:
    """IsADirectoryError for a directory, OSError for any other file that is not regular."""
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(f"{relative!r} is a directory, not a regular file")
    if not stat.S_ISREG(status.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", relative)


def open_directory(place: Located) -> int:
    """A descriptor of the directory at ``place`` (never through a symlink)."""
    return os.open(place.name, _DIR_FLAGS | _NOFOLLOW, dir_fd=place.dir_fd)

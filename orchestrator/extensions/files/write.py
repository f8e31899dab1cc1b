"""Atomic replacement of one file, and reading one file whole within a bound.

``replace_file`` never changes the user's file in place: the new bytes go to a
temporary file in the same directory, which is flushed to disk (fsync) and
renamed over the original, then the directory is flushed too. A failure or a
kill at any moment leaves either the old content or the new one, never a
truncated file (a kill may leave the temporary ``.NAME.XXXXXXXXXXXX.tmp``
behind). The original's permission bits are kept; its owner, ACLs and
extended attributes are not carried over, and a new file gets mode 0644 less
the umask. A regular file with more than one hard link is refused: the rename
would silently split it from its other names, and one of them may be outside
the root.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import secrets
import stat

from orchestrator.extensions.files.confine import Located, open_regular, require_regular

_NAME_MAX = 255
_CHUNK = 1 << 20


class HardLinkRefused(OSError):
    """A write aimed at a regular file that has more than one hard link."""


def _refuse_hard_links(status: os.stat_result, relative: str) -> None:
    if status.st_nlink > 1:
        raise HardLinkRefused(
            errno.EMLINK,
            f"the file has {status.st_nlink} hard links (one may be outside the workspace); "
            "refusing to write through it",
            relative,
        )


def _temporary_name(name: str) -> str:
    token = secrets.token_hex(6)
    candidate = f".{name}.{token}.tmp"
    return candidate if len(os.fsencode(candidate)) <= _NAME_MAX else f".{token}.tmp"


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[:_CHUNK]) :]


def replace_file(place: Located, data: bytes | bytearray) -> None:
    """Make ``place`` hold exactly ``data``, atomically, keeping an existing file's mode."""
    try:
        current: os.stat_result | None = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        current = None
    if current is not None:
        require_regular(current, place.relative)
        _refuse_hard_links(current, place.relative)
    temporary = _temporary_name(place.name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600 if current is not None else 0o644, dir_fd=place.dir_fd)
    try:
        try:
            if current is not None:
                os.fchmod(fd, stat.S_IMODE(current.st_mode))
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, place.name, src_dir_fd=place.dir_fd, dst_dir_fd=place.dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=place.dir_fd)
        raise
    with contextlib.suppress(OSError):
        os.fsync(place.dir_fd)


def read_for_edit(place: Located, limit: int) -> bytearray:
    """The bytes of the regular file at ``place``, checked to be UTF-8.

    ValueError when it is larger than ``limit`` bytes, HardLinkRefused when it
    has more than one link, UnicodeDecodeError when it is not UTF-8. The check
    decodes in pieces, so memory stays near the file's size.
    """
    fd, status = open_regular(place)
    try:
        _refuse_hard_links(status, place.relative)
        if status.st_size > limit:
            raise ValueError(
                f"{place.relative} is {status.st_size} bytes; edit_file changes files up to {limit} bytes "
                "(use write_file to replace it whole)"
            )
        data = bytearray()
        while piece := os.read(fd, _CHUNK):
            data += piece
            if len(data) > limit:
                raise ValueError(f"{place.relative} grew past {limit} bytes while it was read")
    finally:
        os.close(fd)
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    view = memoryview(data)
    for start in range(0, len(data), _CHUNK):
        decoder.decode(view[start : start + _CHUNK])
    decoder.decode(b"", final=True)
    return data

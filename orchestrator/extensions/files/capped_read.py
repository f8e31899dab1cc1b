"""Reading a text file an extension did not write: bounded, never blocking, always decodable."""

from __future__ import annotations

import errno
import os
import stat

import attrs

from orchestrator.text import clean_text

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


@attrs.frozen
class CappedText:
    """The first ``limit`` bytes of a file as text, and how many bytes were left out."""

    text: str
    left_out: int = 0

    def with_note(self, hint: str) -> str:
        """The text, followed by a line saying what was cut (when something was)."""
        if not self.left_out:
            return self.text
        return f"{self.text}\n[truncated: {self.left_out} more bytes; {hint}]"


def read_capped_fd(fd: int, limit: int, shown: str) -> CappedText:
    """Read a regular file's descriptor: at most ``limit`` bytes, invalid UTF-8 replaced.

    A FIFO, socket or device is refused (OSError) before a byte is read, so a
    hostile file cannot make the caller wait.
    """
    status = os.fstat(fd)
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", shown)
    if not stat.S_ISREG(status.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", shown)
    pieces: list[bytes] = []
    size = 0
    while size <= limit and (piece := os.read(fd, min(65536, limit + 1 - size))):
        pieces.append(piece)
        size += len(piece)
    data = b"".join(pieces)
    left_out = max(status.st_size - limit, 1 if len(data) > limit else 0, 0)
    return CappedText(clean_text(data[:limit].decode("utf-8", errors="replace")), left_out)


def read_capped(path: str | os.PathLike[str], limit: int) -> CappedText:
    """Open ``path`` (symlinks followed) without blocking and read it as ``read_capped_fd`` does."""
    fd = os.open(path, _FLAGS)
    try:
        return read_capped_fd(fd, limit, os.fspath(path))
    finally:
        os.close(fd)

"""Session locks: in one process, or across processes through a lock file.

``FileLocks`` gives each session an exclusive lock that belongs to one open file
description: on Linux a byte range of one shared file (``F_OFD_SETLK``), so
taking and dropping a session's lock is one system call each and no file is
made per session; elsewhere a ``flock`` on a file of its own per session. The
kernel drops a lock when its holder's file descriptor closes, also when the
process is killed, so a dead process never blocks a session; two stores of one
process exclude each other too. ``ProcessLocks`` is the same in memory, for
stores only one process sees.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import struct
import sys
import threading
from collections.abc import Callable

from orchestrator.store.errors import SessionLocked
from orchestrator.store.interface import SessionLock

__all__ = ["FileLocks", "ProcessLocks"]


class _Held(SessionLock):
    def __init__(self, on_release: Callable[[], None]) -> None:
        self._on_release = on_release
        self._lock = threading.Lock()
        self._released = False

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._on_release()


class _Locks:
    """Keeps the locks it gave out, so a closing store can release them all."""

    def __init__(self) -> None:
        self._given: set[SessionLock] = set()
        self._given_lock = threading.Lock()

    def _give(self, release: Callable[[], None]) -> SessionLock:
        held: _Held

        def forget_and_release() -> None:
            with self._given_lock:
                self._given.discard(held)
            release()

        held = _Held(forget_and_release)
        with self._given_lock:
            self._given.add(held)
        return held

    def release_all(self) -> None:
        with self._given_lock:
            given = list(self._given)
        for held in given:
            held.release()


class ProcessLocks(_Locks):
    """Session locks in this process's memory."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self._lock = threading.Lock()
        self._held: set[str] = set()

    def acquire(self, session_id: str) -> SessionLock:
        with self._lock:
            if session_id in self._held:
                raise SessionLocked(session_id, self.where, f"process {os.getpid()}")
            self._held.add(session_id)

        def release() -> None:
            with self._lock:
                self._held.discard(session_id)

        return self._give(release)


_RANGES = sys.platform == "linux" and hasattr(fcntl, "F_OFD_SETLK")
"""Whether session locks are byte ranges of one file (Linux's open file description locks)."""
_SLOT_BITS = 23
"""Each session's range starts at a multiple of 2**23 bytes: wider than any range a holder takes (below)."""
_SLOTS_BITS = 39
"""How many bits of a session id's digest choose its slot; the last slot still ends below 2**63 (the largest offset)."""
_PID_LIMIT = 1 << 22
"""Linux's largest process id: a holder's range is ``1 + pid`` bytes long, so another process reads the pid from it."""
_FLOCK = "@hhqqi"
"""``struct flock``: type, whence, start, length, pid."""


class FileLocks(_Locks):
    """Session locks shared with every process that opens the same ``directory``.

    On Linux, one file (``sessions.lock``) in ``directory``, opened once per store: a session's
    lock is the byte range at a slot chosen by a hash of its id, ``1 + pid`` bytes long, which tells
    a refused process the holder's pid. Two sessions whose ids hash to one slot (one chance in 5 * 10**11
    for two held at once) take turns as one session would. Elsewhere, one file per session
    (named by a hash of its id, holding the holder's pid) with an exclusive ``flock``; those files
    stay: removing one while another process waits to open it would let two holders in.
    """

    def __init__(self, directory: str, where: str) -> None:
        super().__init__()
        self.directory = directory
        self.where = where
        self._ranges_lock = threading.Lock()
        self._fd: int | None = None  # the shared file, opened at the first lock
        self._held: dict[int, str] = {}  # slot -> session whose lock this store holds there

    def _digest(self, session_id: str) -> bytes:
        return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()

    def _path(self, session_id: str) -> str:
        return os.path.join(self.directory, f"{self._digest(session_id).hex()[:40]}.lock")

    def acquire(self, session_id: str) -> SessionLock:
        return self._acquire_range(session_id) if _RANGES else self._acquire_file(session_id)

    def _acquire_range(self, session_id: str) -> SessionLock:
        slot = int.from_bytes(self._digest(session_id)[:8], "big") >> (64 - _SLOTS_BITS)
        start = slot << _SLOT_BITS
        length = 1 + min(os.getpid(), _PID_LIMIT)
        with self._ranges_lock:
            if slot in self._held:
                raise SessionLocked(session_id, self.where, f"process {os.getpid()}")
            if self._fd is None:
                os.makedirs(self.directory, exist_ok=True)
                path = os.path.join(self.directory, "sessions.lock")
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fd = self._fd
            try:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, start, length, 0))
            except OSError as refused:
                if refused.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise SessionLocked(session_id, self.where, self._holder(fd, start)) from None
            self._held[slot] = session_id

        def release() -> None:
            with self._ranges_lock:
                if self._held.pop(slot, None) is None or self._fd != fd:
                    return  # the file was closed meanwhile (``release_all``), which dropped the lock
                unlock = struct.pack(_FLOCK, fcntl.F_UNLCK, os.SEEK_SET, start, length, 0)
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, unlock)

        return self._give(release)

    @staticmethod
    def _holder(fd: int, start: int) -> str | None:
        """Who holds the range at ``start``, as its length says (None when it is no holder's of this kind)."""
        with contextlib.suppress(OSError):
            probe = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, start, 1, 0)
            kind, _, found_start, found_length, _ = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe))
            if kind != fcntl.F_UNLCK and found_start == start and 1 < found_length <= 1 + _PID_LIMIT:
                return f"process {found_length - 1}"
        return None

    def release_all(self) -> None:
        super().release_all()
        with self._ranges_lock:
            fd, self._fd = self._fd, None
            self._held.clear()
        if fd is not None:
            os.close(fd)  # drops any lock still held (none should be)

    def _acquire_file(self, session_id: str) -> SessionLock:
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self._path(session_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise SessionLocked(session_id, self.where, f"process {holder}" if holder else None) from None
        except BaseException:
            os.close(fd)
            raise
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)

        def release() -> None:
            os.close(fd)  # closing the descriptor drops the lock

        return self._give(release)

"""Session locks: in one process, or across processes through lock files.

``FileLocks`` gives each session a lock file holding an exclusive ``flock``.
The kernel drops the lock when its holder's file descriptor closes, also when
the process is killed, so a dead process never blocks a session. ``flock``
locks belong to one open file, so two stores of one process exclude each other
too. ``ProcessLocks`` is the same in memory, for stores only one process sees.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
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


class FileLocks(_Locks):
    """Session locks as ``flock`` on one file per session in ``directory``.

    The files stay (a few bytes each, named by a hash of the session id): removing a
    lock file while another process waits to open it would let two holders in.
    """

    def __init__(self, directory: str, where: str) -> None:
        super().__init__()
        self.directory = directory
        self.where = where

    def _path(self, session_id: str) -> str:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return os.path.join(self.directory, f"{digest}.lock")

    def acquire(self, session_id: str) -> SessionLock:
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

"""Errors of session stores."""

from __future__ import annotations

from orchestrator.errors import AgentError


class StoreError(AgentError):
    """A session store could not read or write what it was asked to."""


def one_line(error: BaseException) -> str:
    """A database driver's message on one line (libpq puts its hints on lines of their own)."""
    return " ".join(str(error).split())


class SessionOwned(StoreError):
    """The session belongs to another principal than the one that would add to it (or take it as its own)."""

    def __init__(self, session_id: str, owner: str) -> None:
        self.session_id = session_id
        self.owner = owner
        super().__init__(f"session {session_id!r} belongs to another principal")


class StoreUnavailable(StoreError):
    """The store's database could not be reached: its connection broke during the call, or none could be made.

    A call whose connection broke may or may not have taken effect (its commit may
    have been made before the answer was lost). The next call connects again.
    """


class SessionLocked(StoreError):
    """Another process (or another store object) is running this session on the same store.

    ``holder`` names the holder when the store knows it (for SQLite, the holder's process
    id, as its lock says).
    """

    def __init__(self, session_id: str, where: str, holder: str | None = None) -> None:
        self.session_id = session_id
        self.where = where
        self.holder = holder
        by = f" by {holder}" if holder else ""
        super().__init__(f"session {session_id!r} is already being run{by} on {where}; refusing to run it twice")


class SessionCarried(SessionLocked):
    """The run store of the same file has a run of this session that has not ended (queued, running, or parked
    waiting for an answer): the run store's carrier (``serve``, a worker) owns the session until the run ends."""

    def __init__(self, session_id: str, where: str, request_id: str, status: str) -> None:
        self.session_id = session_id
        self.where = where
        self.holder = f"run {request_id}"
        self.request_id = request_id
        self.status = status
        StoreError.__init__(
            self,
            f"session {session_id!r} has run {request_id!r} {status} in the run store of {where}: answer or cancel"
            " it where it is served (python -m orchestrator serve); refusing to run the session here too",
        )


class SessionLost(StoreError):
    """The store's lock on this session went with its broken connection, and another holder took it.

    Every call for the session fails until the lock is released (its runner ends).
    """

    def __init__(self, session_id: str, where: str) -> None:
        self.session_id = session_id
        self.where = where
        super().__init__(
            f"session {session_id!r}: its lock went with the connection to {where}, and another process took it"
        )


class SchemaTooNew(StoreError):
    """The database was written by a newer version of this library."""

    def __init__(self, where: str, found: int, known: int) -> None:
        self.where = where
        self.found = found
        self.known = known
        super().__init__(f"{where} has schema version {found}; this library knows versions up to {known}")


class SchemaUnrecognised(StoreError):
    """The database holds tables this library neither wrote nor can migrate: ``found`` says what is there."""

    def __init__(self, where: str, found: str, expected: str) -> None:
        self.where = where
        self.found = found
        self.expected = expected
        super().__init__(f"{where}: {found}; expected {expected}")


class UnusableLocation(StoreError):
    """A store's file (or the directory it goes in) cannot be created or opened: ``reason`` is the system's."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot use the store at {path}: {reason}")

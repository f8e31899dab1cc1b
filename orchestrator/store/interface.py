"""The session store interface: what any durable home of sessions provides.

A store keeps, per session: its messages in order (each a row with a
position), the approvals its requests wait for, and its Plan Mode state; and
it lets one runner at a time hold a session (``lock_session``). Every method
blocks and is safe to call from any thread: the runtime calls them through
``trio.to_thread``. Each ``apply`` is one transaction: it happens whole or not
at all. Runs, an inbox and an event log belong beside these as further
methods of the same store (one database, one transaction per change).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import attrs

from orchestrator.messages import Message

__all__ = ["PendingApproval", "Quarantined", "SessionChange", "SessionLock", "SessionStore", "StoredRow", "Unreadable"]


@attrs.frozen
class StoredRow:
    """One stored message as it is in the store: its body not yet decoded."""

    row_id: int
    position: int
    role: str
    body: str


@attrs.frozen
class Unreadable:
    """A stored row that does not decode, and the placeholder that replaces it."""

    row_id: int
    reason: str
    placeholder: Message


@attrs.frozen
class Quarantined:
    """A row set aside as unreadable: its raw body as it was found, and why it did not decode."""

    row_id: int
    session_id: str
    position: int
    body: str
    reason: str


@attrs.frozen
class PendingApproval:
    """A call that waits (or waited, before a restart) for an external response."""

    session_id: str
    request_id: str
    tool_call_id: str
    event: str
    response_event: str
    payload: Mapping[str, Any]
    response: Mapping[str, Any] | None
    created: float
    fingerprint: str | None = None
    """The fingerprint (JSON text) of the agent whose request waits (``orchestrator.runtime.fingerprint``)."""


@attrs.frozen
class SessionChange:
    """One atomic change of one session, applied in the order of these fields.

    - ``quarantine``: each unreadable row keeps its raw body aside and reads as its placeholder;
    - ``replace``: the session's messages become these (positions from 0);
    - ``append``: messages at the given positions (a position already taken is an error);
    - ``drop_approvals``: these waits are over (an appended result ends its call's wait too);
    - ``plan_mode``: the session's Plan Mode state (``normal`` clears it).
    """

    quarantine: tuple[Unreadable, ...] = ()
    replace: tuple[Message, ...] | None = None
    append: tuple[tuple[int, Message], ...] = ()
    drop_approvals: frozenset[str] = frozenset()
    plan_mode: str | None = None


class SessionLock(abc.ABC):
    """A session held by one runner until ``release`` (or until its process dies)."""

    @abc.abstractmethod
    def release(self) -> None:
        """Let others run the session; releasing twice does nothing."""


class SessionStore(abc.ABC):
    """Sessions, their messages, pending approvals and Plan Mode state (blocking, thread-safe)."""

    #: where the store keeps its data, for messages
    where: str = "a session store"

    # sessions and messages --------------------------------------------------

    @abc.abstractmethod
    def sessions(self) -> list[str]:
        """Ids of sessions with stored messages, oldest first."""

    @abc.abstractmethod
    def rows(self, session_id: str) -> list[StoredRow]:
        """The session's stored messages in order of position, undecoded."""

    @abc.abstractmethod
    def apply(self, session_id: str, change: SessionChange) -> None:
        """Make ``change`` in one transaction; StoreError (nothing changed) when it cannot."""

    @abc.abstractmethod
    def quarantined(self, session_id: str | None = None) -> list[Quarantined]:
        """Rows set aside as unreadable, oldest first (optionally of one session)."""

    @abc.abstractmethod
    def delete_session(self, session_id: str) -> bool:
        """Remove every row of the session (messages, waits and answers, Plan Mode, quarantined rows) in one
        transaction; whether there was any. The caller holds the session (``lock_session``)."""

    def idle_sessions(self, idle_before: float) -> list[str]:
        """Ids of sessions whose last activity (a message, a wait, a Plan Mode change) is older than
        ``idle_before`` (a time.time() value) and that have no wait recorded (none waits for an answer)."""
        return []

    # approvals --------------------------------------------------------------

    @abc.abstractmethod
    def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """Recorded waits, oldest first (optionally of one session)."""

    @abc.abstractmethod
    def record_wait(self, wait: PendingApproval) -> None:
        """Record that a call waits (replacing an earlier wait of the same call id, answer dropped)."""

    @abc.abstractmethod
    def record_response(
        self, session_id: str, tool_call_id: str, response_event: str, response: Mapping[str, Any]
    ) -> bool:
        """Record the answer to a wait still unanswered; whether it was recorded."""

    @abc.abstractmethod
    def forget_request(self, session_id: str, request_id: str) -> None:
        """Drop the unanswered waits of a request that ended."""

    # modes ------------------------------------------------------------------

    @abc.abstractmethod
    def plan_mode(self, session_id: str) -> str:
        """The session's last recorded Plan Mode state (``normal`` when none is)."""

    # ownership --------------------------------------------------------------

    @abc.abstractmethod
    def lock_session(self, session_id: str) -> SessionLock:
        """Hold the session, or raise SessionLocked at once when another runner holds it.

        A holder that dies (its process killed) holds nothing: the next runner
        takes the session at once.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the store holds open, the sessions it holds included."""

"""The run store: runs as rows, shared by every worker and web node of a deployment.

A run is one request kept durably: its session, status, the request machine's
states and serialised context (the checkpoint), a version, a lease, and a log
of the events it streamed. Answers, approvals and steering reach a run as rows
of a durable inbox. Every method blocks and is safe to call from any thread
(callers under trio use ``trio.to_thread``); each is one transaction.

Fencing: a worker holds a run through a ``Lease`` (owner, token, version). Every
write it makes (``commit``) names the lease and succeeds only while the row
still carries that token and version; otherwise it raises ``LeaseLost`` and
changes nothing, so a worker that lost its lease (it stalled past the expiry
and another took the run) can never write a duplicate result or event. A
heartbeat (``renew``) is checked by the token alone.

Statuses: ``queued`` (runnable, held by nobody), ``running`` (leased),
``parked`` (waits for an answer and holds no worker; posting to its inbox makes
it ``queued`` again, in the same transaction), and the final ``completed``,
``failed``, ``cancelled``. One session has at most one run that is not final.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from orchestrator.messages import Message
from orchestrator.store.changes import ChangeFeed, PollingFeed
from orchestrator.store.errors import StoreError
from orchestrator.store.interface import SessionLock

__all__ = [
    "ACTIVE",
    "FINAL",
    "LOCAL_PRINCIPAL",
    "AnswerWaiting",
    "InboxItem",
    "InboxKeyReused",
    "InboxRefused",
    "Lease",
    "LeaseLost",
    "NewInboxItem",
    "PrunedRun",
    "RunCommit",
    "RunRecord",
    "RunStore",
    "StoredEvent",
    "UnknownRunRow",
]

LOCAL_PRINCIPAL = "local"
"""The principal of requests served without identities, and the owner of sessions kept before owners were."""

ACTIVE = frozenset({"queued", "running", "parked"})
FINAL = frozenset({"completed", "failed", "cancelled"})


class LeaseLost(StoreError):
    """The lease is no longer this holder's: another worker took the run, or the run ended."""

    def __init__(self, request_id: str, why: str) -> None:
        self.request_id = request_id
        self.why = why
        super().__init__(f"lease of run {request_id!r} lost: {why}")


class AnswerWaiting(StoreError):
    """An answer to call ``tool_call_id`` of run ``request_id`` waits in its inbox already: a call takes one."""

    def __init__(self, request_id: str, tool_call_id: str) -> None:
        self.request_id = request_id
        self.tool_call_id = tool_call_id
        super().__init__(f"call {tool_call_id!r} of run {request_id!r} has an answer waiting already")


class InboxRefused(StoreError):
    """The run, as its row stands when the item would be added, does not take it: ``reason`` says why."""

    def __init__(self, request_id: str, reason: str) -> None:
        self.request_id = request_id
        self.reason = reason
        super().__init__(reason)


class InboxKeyReused(StoreError):
    """Idempotency key ``key`` was used in session ``session_id`` with another body: a key names one item."""

    def __init__(self, session_id: str, key: str) -> None:
        self.session_id = session_id
        self.key = key
        super().__init__(f"the idempotency key {key!r} was used in session {session_id!r} with another body")


class UnknownRunRow(StoreError, KeyError):
    """No run has this request id."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        super().__init__(f"no run {request_id!r}")

    def __str__(self) -> str:
        return str(self.args[0])


@attrs.frozen
class RunRecord:
    """A run as the store has it."""

    request_id: str
    session_id: str
    status: str
    input: Mapping[str, Any]
    checkpoint: Mapping[str, Any] | None
    version: int
    last_seq: int
    lease_owner: str | None
    lease_expires: float | None
    cancel_requested: bool
    created: float
    updated: float
    trace_context: Mapping[str, str] | None = None
    """The W3C trace context (``traceparent``, ``tracestate``) every segment of the run is traced under, if any
    (None too when the stored one does not decode)."""
    settings: Mapping[str, Any] | None = None
    """The run's own model settings and output type as JSON (``cluster.run_settings``); None: the agent's."""
    unreadable: str | None = None
    """Why the row's input, checkpoint or settings do not decode (that part then reads as empty); None when all do."""
    fingerprint: str | None = None
    """The fingerprint (JSON text) of the agent that started the run, or that took it over when it changed and
    its policy let the run go on (``orchestrator.runtime.fingerprint``); None before its first commit."""

    @property
    def final(self) -> bool:
        return self.status in FINAL


@attrs.frozen
class Lease:
    """A worker's hold on a run: valid while the row carries ``token`` and ``version``."""

    request_id: str
    session_id: str
    owner: str
    token: str
    version: int
    expires: float
    last_seq: int
    cancel_requested: bool = False


@attrs.frozen
class Claimed:
    """A run as its claim took it: the lease, the run's row after the claim, and its session's history then; with
    ``inbox``, the items of its inbox not consumed then (None: the claim did not read them)."""

    lease: Lease
    record: RunRecord
    history: tuple[Message, ...]
    inbox: tuple[InboxItem, ...] | None = None


@attrs.frozen
class Claim:
    """What one claim took, and (when it took fewer runs than it could) the store's ``next_wake`` then."""

    runs: tuple[Claimed, ...]
    wake_in: float | None = None
    fresh_left: bool = False
    """Whether a run that never ran was left for the ``fresh`` bound alone (more may be claimed once slots free)."""


@attrs.frozen
class StoredEvent:
    """One streamed event of a run: its ``seq`` and its wire-format JSON object."""

    request_id: str
    seq: int
    type: str
    body: Mapping[str, Any]


@attrs.frozen
class NewInboxItem:
    """An external event for a run: an approval, an answer, steering, a cancellation."""

    session_id: str
    request_id: str
    name: str
    payload: Mapping[str, Any]
    idempotency_key: str | None = None


@attrs.frozen
class InboxItem:
    id: int
    session_id: str
    request_id: str
    name: str
    payload: Mapping[str, Any]
    idempotency_key: str | None
    created: float


@attrs.frozen
class RunCommit:
    """What one fenced write changes, all in one transaction, in this order.

    - ``history``: when not None, replaces the session's history (a compaction), before ``messages``;
    - ``messages``: appended to the session's history;
    - ``events``: appended to the run's event log; their seqs must continue the log;
    - ``checkpoint``: replaces the run's checkpoint;
    - ``consumed``: inbox items this write used up (an item is consumed once);
    - ``status``: ``running`` keeps the lease; ``parked``, ``queued`` or a final status
      releases it (a parked run with unconsumed items is queued at once).

    A ``checkpoint`` of None keeps the stored one, and so does a ``fingerprint`` of None (the carrying
    agent's fingerprint, as JSON text). ``retry_after`` (seconds, with ``queued``) keeps the
    run from being claimed again before then, on the database's clock: a give-back of a run its
    carrier could not run. ``wake_at`` (seconds since the epoch, with ``parked``) is when the parked
    run is claimable again although nobody answered: the earliest expiry of its waits.
    ``trace_context`` is kept as the run's only when it has none yet.
    """

    messages: tuple[Message, ...] = ()
    events: tuple[StoredEvent, ...] = ()
    history: tuple[Message, ...] | None = None
    checkpoint: Mapping[str, Any] | None = None
    consumed: tuple[int, ...] = ()
    status: str = "running"
    retry_after: float | None = None
    wake_at: float | None = None
    trace_context: Mapping[str, str] | None = None
    fingerprint: str | None = None


@attrs.frozen
class PrunedRun:
    """What is remembered of a pruned run: its id, why it went (``ended`` or ``idle_session``) and when."""

    request_id: str
    reason: str
    pruned: float


class RunStore(abc.ABC):
    """Runs, their inbox and their event log (blocking, thread-safe, one transaction per call)."""

    where: str = "a run store"

    @abc.abstractmethod
    def create_run(
        self,
        session_id: str,
        request_id: str,
        input_message: Mapping[str, Any],
        *,
        trace_context: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
        owner: str | None = None,
    ) -> RunRecord:
        """A new ``queued`` run (with its trace context and own settings, when given); SessionBusy when the
        session has a run that is not final, StoreError when the request id is taken. ``owner`` is the principal
        the run is kept for: SessionOwned when the session belongs to another (see ``owners``); None checks
        nothing."""

    @abc.abstractmethod
    def owners(self, session_ids: Sequence[str]) -> dict[str, str]:
        """The owner of each of ``session_ids`` the store knows (its runs or its history): the principal its
        first run was started for, else the one it was forked for (``fork``), else ``LOCAL_PRINCIPAL`` (sessions
        kept before owners were recorded)."""

    @abc.abstractmethod
    def run(self, request_id: str) -> RunRecord | None:
        """The run, or None."""

    @abc.abstractmethod
    def runs(self, session_id: str | None = None, *, active: bool = False) -> list[RunRecord]:
        """Runs, oldest first (optionally of one session, optionally only those not final)."""

    @abc.abstractmethod
    def claim(self, owner: str, lease_seconds: float, limit: int = 1) -> list[Lease]:
        """Lease up to ``limit`` runnable runs: ``queued`` ones past their ``retry_after``, and ``running``
        ones whose lease expired (their worker stopped), and ``parked`` ones whose ``wake_at`` has passed (a wait
        expired while nobody held them), all judged on the store's own clock. Claimed
        runs are ``running``; a new token each; a lease keeps the run's cancel flag."""

    def claim_runs(self, owner: str, lease_seconds: float, limit: int = 1, fresh: int | None = None) -> Claim:
        """``claim``, with each claimed run's row and history, and ``next_wake`` when fewer than ``limit`` runs
        were taken: what a worker reads before it carries them (a store may do it all in one transaction).

        ``fresh`` bounds the runs taken that never ran (no checkpoint), so that runs to be resumed find a slot
        while new ones wait; this default implementation does not apply it.
        """
        leases = self.claim(owner, lease_seconds, limit)
        taken = []
        for lease in leases:
            record = self.run(lease.request_id)
            if record is not None:
                taken.append(Claimed(lease, record, tuple(self.history(lease.session_id))))
        return Claim(tuple(taken), self.next_wake() if len(leases) < limit else None)

    def next_wake(self) -> float | None:
        """Seconds until the earliest ``wake_at`` of a parked run, on the store's clock (negative when it has
        passed; None: no parked run has one). A claim takes such a run once it has passed."""
        return None

    @abc.abstractmethod
    def renew(self, lease: Lease, lease_seconds: float) -> Lease:
        """Extend the lease (the heartbeat); LeaseLost when it is not this holder's any more.

        Only the token is checked: a heartbeat may overlap the holder's own commits, which move
        the version (writes are fenced by both)."""

    @abc.abstractmethod
    def commit(self, lease: Lease, change: RunCommit) -> Lease:
        """Make ``change`` (fenced by the lease; the version moves on); LeaseLost, nothing written,
        when the lease is not this holder's."""

    def commit_many(self, commits: Sequence[tuple[Lease, RunCommit]]) -> list[Lease | Exception]:
        """``commit`` of each pair, in order (a store may make them in one transaction): for each, its new lease or
        the exception (an Exception) its own commit raised, which leaves nothing of that one written and the
        others made. An exception raised instead (the store cannot be reached) may leave any of them made."""
        outcomes: list[Lease | Exception] = []
        for lease, change in commits:
            try:
                outcomes.append(self.commit(lease, change))
            except Exception as error:
                outcomes.append(error)
        return outcomes

    @abc.abstractmethod
    def release(self, lease: Lease) -> None:
        """Hand the run back at its last commit and end the lease now (a drain): ``queued``, no holder, its
        checkpoint, inbox and cancel flag kept, claimable at once by any process. Fenced by the lease's token
        alone; LeaseLost, nothing written, when the run is not this holder's any more."""

    @abc.abstractmethod
    def events(self, request_id: str, after: int = 0, limit: int = 500) -> list[StoredEvent]:
        """The run's events with seq > ``after``, in order."""

    @abc.abstractmethod
    def post(
        self, item: NewInboxItem, check: Callable[[RunRecord], str | None] | None = None
    ) -> tuple[InboxItem, bool]:
        """Add ``item`` to the run's inbox; with an idempotency key already used in its session, the
        earlier item and False (also when another post of that key wins a race), or InboxKeyReused
        when that item had another name or payload. A parked run becomes queued in
        the same transaction. UnknownRunRow when the run does not exist; StoreError when it is
        final; AnswerWaiting when the item answers a call (``tool_call_id``) whose answer already
        waits unconsumed; InboxRefused with its reason when ``check`` finds one in the run as it is
        in this transaction (no other post or commit of the run can come between)."""

    @abc.abstractmethod
    def inbox(self, request_id: str, *, after_id: int = 0) -> list[InboxItem]:
        """The run's unconsumed inbox items with id > ``after_id``, oldest first."""

    @abc.abstractmethod
    def cancel(
        self,
        request_id: str,
        final_event: Callable[[int], StoredEvent],
        settle: Callable[[RunRecord, list[Message]], Sequence[Message]] | None = None,
    ) -> RunRecord:
        """Ask the run to stop. A run no worker holds (queued, parked) ends ``cancelled`` at once, in one
        transaction: ``settle(run, history)``'s messages (a result for each open call) appended to the
        session's history, then ``final_event(seq)`` (its run_cancelled, numbered after the log's last).
        A running one is flagged (``cancel_requested``) for its worker, which sees it when it renews its
        lease; the flag outlives a give-back and a lease expiry. UnknownRunRow when there is no such run."""

    @abc.abstractmethod
    def history(self, session_id: str) -> list[Message]:
        """The session's messages in order; an unreadable row reads as a marked placeholder."""

    @abc.abstractmethod
    def sessions(self) -> list[str]:
        """Ids of sessions with runs or stored messages, oldest first."""

    @abc.abstractmethod
    def fork(self, source: str, target: str, *, turns: int | None = None, owner: str | None = None) -> int:
        """Copy ``source``'s messages (with ``turns``, up to the end of that turn: ``orchestrator.store.fork``'s
        ``first_turns``) into the new session ``target``, in one transaction; how many were copied. The fork is
        ``owner``'s (None: nobody's in particular, as a session kept before owners were) and has ``source``'s set
        title, marked as a fork (``forked_title``); a fork of no message leaves nothing stored.

        ForkRefused (``kind`` ``unknown``, ``exists`` or ``turn``) when the store knows no ``source``, knows
        ``target`` already, or ``source`` has no such turn; SessionBusy while a run of ``source`` has not ended.
        Nothing is written when it is refused."""

    @abc.abstractmethod
    def set_title(self, session_id: str, title: str) -> bool:
        """Give the session the title ``title`` (in place of one set before); False, nothing written, when the
        store knows no such session (it has no run and no stored message)."""

    @abc.abstractmethod
    def titles(self, session_ids: Sequence[str]) -> dict[str, str]:
        """The title of each of ``session_ids`` that has one: the one set (``set_title``), else its first input on
        one line, shortened (``orchestrator.store.titles.first_input_title``). A session with neither is left out."""

    @abc.abstractmethod
    def set_titles(self, session_ids: Sequence[str]) -> dict[str, str]:
        """The title set (``set_title``) for each of ``session_ids`` that has one; those titled by their first
        input are left out."""

    @abc.abstractmethod
    def delete_session(self, session_id: str, *, cancel: bool = False, ended_only: bool = False) -> bool:
        """Remove the session's runs, their event logs and inbox, its history and its title, in one transaction;
        whether there was any. SessionBusy, nothing removed, while a run of it is ``running`` (held by a
        worker), unless ``cancel``: its worker's next write or heartbeat then finds it gone (LeaseLost)
        and stops without writing. With ``ended_only``, SessionBusy while any run of it has not ended (is queued,
        running or parked)."""

    @abc.abstractmethod
    def prune_sessions(self, idle_before: float) -> list[str]:
        """Delete (as ``delete_session`` does) every session without a run that is not final whose last
        message and last run change are older than ``idle_before`` (a time.time() value); their ids.
        Each of their runs' ids is remembered as pruned (``pruned``), with no trace of the session."""

    @abc.abstractmethod
    def prune(self, older_than: float) -> int:
        """Delete final runs (their events and inbox) last updated before ``older_than``
        (a time.time() value), remembering each id as pruned (``pruned``); how many runs went. A session's
        newest run keeps its row (not its events or inbox) when it has an owner, so the session's owner
        outlives its pruned runs."""

    def pruned(self, request_id: str) -> PrunedRun | None:
        """What is remembered of the pruned run ``request_id`` (None: never pruned, or forgotten since)."""
        return None

    def forget_pruned(self, before: float) -> int:
        """Forget the runs pruned before ``before`` (a time.time() value): following them is then a 404."""
        return 0

    def watch(self) -> ChangeFeed:
        """A feed of this store's changes for one consumer (close it when done); this default one polls."""
        return PollingFeed()

    def lock_session(self, session_id: str) -> SessionLock | None:
        """Hold the session while a carrier runs it, excluding the session stores of the same database (``chat``):
        SessionLocked while one of them holds it. None when this store shares no session lock with them.

        It answers at once and never waits for a holder or a database (a system call or two on a lock file): a
        carrier asks it from its event loop."""
        return None

    @property
    def shares_session_locks(self) -> bool:
        """Whether ``lock_session`` may hold a lock (False: it always returns None, and a carrier need not ask it).
        By default, whether the store's class has a ``lock_session`` of its own."""
        return type(self).lock_session is not RunStore.lock_session

    def wait_for_work(self, timeout: float) -> None:
        """Block until work may be there (a hint, never the truth) or ``timeout`` passes."""
        import time

        time.sleep(timeout)

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections."""

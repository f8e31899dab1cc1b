"""GroupCommit: the commits of the runs one process carries, made together when they are ready at once.

Commits go to one thread of the process, which makes all those waiting in one call of the store
(``RunStore.commit_many``: one transaction, each commit fenced by its own lease and undone alone
when it fails), then the ones that came meanwhile, until none waits; so the store is never idle while a
commit waits, and no commit waits for the trio loop to pass the turn on. Each caller gets its own
outcome: its new lease, or the exception its own commit raised.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import trio

from orchestrator.store.errors import StoreUnavailable
from orchestrator.store.runs import Lease, RunCommit, RunStore


class _Pending:
    """One caller's commit: what it writes, and once the store answered, its outcome."""

    def __init__(self, lease: Lease, change: RunCommit, token: trio.lowlevel.TrioToken) -> None:
        self.lease = lease
        self.change = change
        self.token = token
        self.outcome: Lease | BaseException | None = None
        self.done = trio.Event()


class GroupCommit:
    """Commits to ``store`` from trio tasks, made in groups by one thread at a time."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._waiting: list[_Pending] = []
        self._making = False  # a thread makes the waiting commits

    async def commit(self, lease: Lease, change: RunCommit) -> Lease:
        """``store.commit(lease, change)``, made in one group with the commits that wait beside it."""
        pending = _Pending(lease, change, trio.lowlevel.current_trio_token())
        with self._lock:
            self._waiting.append(pending)
            start, self._making = not self._making, True
        if start:
            trio.lowlevel.start_thread_soon(self._make, _ignore)
        await pending.done.wait()
        outcome = pending.outcome
        assert outcome is not None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _make(self) -> None:
        """In the thread: make the waiting commits, group after group, until none waits."""
        while True:
            with self._lock:
                group, self._waiting = self._waiting, []
                if not group:
                    self._making = False
                    return
            try:
                outcomes = self._made(group)
            except BaseException as error:  # not the store's answer (an interrupt): every caller of the group gets it
                outcomes = [error] * len(group)
            for pending, outcome in zip(group, outcomes, strict=True):
                pending.outcome = outcome
            for token in {pending.token for pending in group}:
                with contextlib.suppress(trio.RunFinishedError):  # its loop ended: nobody waits any more
                    token.run_sync_soon(_finish, [pending for pending in group if pending.token is token])

    def _made(self, group: Sequence[_Pending]) -> list[Lease | BaseException]:
        """Each commit's outcome. When the store could not be reached, each caller gets a StoreUnavailable of its
        own (its commit may have been made: the retry then fails its fence, LeaseLost); when the group fails as a
        whole otherwise, each commit is made again alone."""
        pairs = [(pending.lease, pending.change) for pending in group]
        if len(pairs) > 1:
            try:
                return list(self.store.commit_many(pairs))
            except StoreUnavailable as down:
                return [StoreUnavailable(str(down)) for _ in pairs]
            except Exception:
                pass
        outcomes: list[Lease | BaseException] = []
        for lease, change in pairs:
            try:
                outcomes.append(self.store.commit(lease, change))
            except Exception as error:
                outcomes.append(error)
        return outcomes


def _finish(group: list[_Pending]) -> None:
    """In the trio loop: wake each caller of the group."""
    for pending in group:
        pending.done.set()


def _ignore(_: object) -> None:
    """The thread's own result: its outcomes went to its callers."""

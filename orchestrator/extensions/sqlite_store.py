"""SQLiteSessionStore: session history and pending approvals in one SQLite file.

Register the store as an extension and let it keep the history::

    store = SQLiteSessionStore("sessions.db")
    client = await create_agent(model, history=None, extensions=[store, AskUserExtension()])

It is ``orchestrator.extensions.session_store.SessionStoreExtension`` (what is
kept, restored and refused, and when) on ``orchestrator.store.SQLiteStore``
(the file, its schema and migrations, and the session locks in
``<path>.locks/``). The names this module always offered are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from orchestrator.checks import path_like
from orchestrator.checks import text as _text
from orchestrator.extensions.session_store import (
    ApprovalResumedEvent,
    PlanModeRestoredEvent,
    SessionStoreExtension,
    StoredMessageUnreadableEvent,
)
from orchestrator.runtime.pending import WaitRule
from orchestrator.store import STOPPED, PendingApproval, SQLiteStore, decode_message, encode_message, repair

__all__ = [
    "STOPPED",
    "ApprovalResumedEvent",
    "PendingApproval",
    "PlanModeRestoredEvent",
    "SQLiteSessionStore",
    "StoredMessageUnreadableEvent",
    "decode_message",
    "encode_message",
    "repair",
]


class SQLiteSessionStore(SessionStoreExtension):
    """Durable session history and pending approvals in SQLite (use with ``history=None``)."""

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: str = "FULL", wait_rules: Iterable[WaitRule] = ()
    ) -> None:
        path_like().check("SQLiteSessionStore.path", path)
        _text().check("SQLiteSessionStore.synchronous", synchronous)
        self.path = os.fspath(path)
        super().__init__(SQLiteStore(path, synchronous=synchronous), wait_rules=wait_rules)

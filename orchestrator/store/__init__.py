"""Session stores: where sessions live between requests and across restarts.

``SessionStore`` (``orchestrator.store.interface``) is the interface; ``SQLiteStore``
keeps sessions in one file, ``MemoryStore`` in this process, and
``orchestrator.store.postgres.PostgresStore`` (the ``postgres`` extra) in PostgreSQL. The extension that
connects a store to an Agent is
``orchestrator.extensions.session_store.SessionStoreExtension``
(``SQLiteSessionStore`` is that extension on an SQLite file).
"""

from __future__ import annotations

from orchestrator.store.codec import UndecodableMessage, decode_message, encode_message, placeholder
from orchestrator.store.errors import (
    SchemaTooNew,
    SchemaUnrecognised,
    SessionCarried,
    SessionLocked,
    SessionLost,
    StoreError,
    StoreUnavailable,
    UnusableLocation,
)
from orchestrator.store.interface import (
    PendingApproval,
    Quarantined,
    SessionChange,
    SessionLock,
    SessionStore,
    StoredRow,
    Unreadable,
)
from orchestrator.store.memory import InMemoryHistory, MemoryStore, SessionHistory
from orchestrator.store.repair import STOPPED, problems, repair
from orchestrator.store.sqlite import SCHEMA_VERSION, SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "STOPPED",
    "InMemoryHistory",
    "MemoryStore",
    "PendingApproval",
    "Quarantined",
    "SQLiteStore",
    "SchemaTooNew",
    "SchemaUnrecognised",
    "SessionCarried",
    "SessionChange",
    "SessionHistory",
    "SessionLock",
    "SessionLocked",
    "SessionLost",
    "SessionStore",
    "StoreError",
    "StoreUnavailable",
    "StoredRow",
    "UndecodableMessage",
    "Unreadable",
    "UnusableLocation",
    "decode_message",
    "encode_message",
    "placeholder",
    "problems",
    "repair",
]

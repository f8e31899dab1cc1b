"""Where the command line keeps the titles of the sessions in its database file.

A file that also holds a run store's tables (a web node's ``serve --db sqlite:///PATH`` uses it) keeps them in
the run store (``RunStore.set_title``), where a web node reads and writes them too; a title kept in
``<db>.titles.json`` by an earlier version still shows for a session the run store has none for. Any other
file keeps them in ``<db>.titles.json`` (``orchestrator.store.titles``), as before.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from orchestrator.messages import Message
from orchestrator.store.errors import UnusableLocation
from orchestrator.store.titles import (
    TITLE_LENGTH,
    first_input_title,
    forget_titles,
    forked_title,
    set_title,
    set_titles,
    title_of,
)

if TYPE_CHECKING:
    from orchestrator.store.runs_sql import SQLRunStore

__all__ = ["TITLE_LENGTH", "SessionTitles", "holds_run_store", "set_title", "set_titles", "title_of"]

RUN_STORE_TABLE = "orchestrator_runs"
"""The table whose presence marks a file as a run store's (every version of its schema has it)."""


def holds_run_store(db: str) -> bool:
    """Whether the SQLite file ``db`` holds the run store's tables; read only, so nothing is made by asking.
    UnusableLocation when the file cannot be read."""
    if db == ":memory:" or db.startswith("file:"):
        return False
    uri = "file:" + urllib.parse.quote(os.path.abspath(db)) + "?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True)
        try:
            found = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (RUN_STORE_TABLE,)
            ).fetchone()
        finally:
            connection.close()
    except sqlite3.Error as failed:
        raise UnusableLocation(db, str(failed)) from None
    return found is not None


@attrs.define
class SessionTitles:
    """The titles of the sessions of the database file ``db``, kept by ``runs`` (the run store in that file)
    when it holds one, else in ``<db>.titles.json``."""

    db: str
    runs: SQLRunStore | None = None

    @classmethod
    def open(cls, db: str) -> SessionTitles:
        """The titles of ``db``'s sessions, with its run store opened when the file holds the run store's tables
        (close it with ``close``)."""
        from orchestrator.store.runs_sql import sqlite_run_store

        return cls(db, sqlite_run_store(db) if holds_run_store(db) else None)

    def close(self) -> None:
        if self.runs is not None:
            self.runs.close()

    def chosen(self, session_ids: Sequence[str]) -> dict[str, str]:
        """The titles set for those of ``session_ids`` that have one (the run store's before the file's)."""
        found = set_titles(self.db)
        if self.runs is not None:
            found.update(self.runs.set_titles(session_ids))
        return found

    def title(self, session_id: str, messages: Sequence[Message], chosen: dict[str, str] | None = None) -> str:
        """The title set for ``session_id`` (from ``chosen`` when given), else its first input shortened, else ""."""
        picked = (self.chosen([session_id]) if chosen is None else chosen).get(session_id)
        return picked if picked is not None else first_input_title(messages)

    def set(self, session_id: str, text: str) -> bool:
        """Give ``session_id`` the title ``text``; False when the run store knows no such session (nothing is
        written). OSError when the titles file cannot be written."""
        if self.runs is not None:
            return self.runs.set_title(session_id, text)
        set_title(self.db, session_id, text)
        return True

    def forked(self, source: str, target: str, messages: Sequence[Message]) -> None:
        """Title the fork ``target`` of ``source`` (whose messages are ``messages``): the run store's fork has
        copied a title it keeps, so only one from the file is copied there; the file marks every fork."""
        if self.runs is None:
            set_title(self.db, target, forked_title(title_of(self.db, source, messages)))
            return
        if source not in self.runs.set_titles([source]):
            legacy = set_titles(self.db).get(source)
            if legacy is not None:
                self.runs.set_title(target, forked_title(legacy))

    def forget(self, session_id: str) -> None:
        """Drop a title kept in the file for a deleted session (the run store drops its own with the session)."""
        with contextlib.suppress(OSError):  # the session is gone; a stale entry names nothing that shows
            forget_titles(self.db, [session_id])

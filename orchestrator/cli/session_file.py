"""The terminal's session file: where ``chat``, ``run`` and ``sessions`` keep their sessions.

The terminal keeps sessions in a session store on purpose: a request there runs while a person
watches it, and a question it left waiting is asked again when that person resumes the session.
So the terminal's store does not give the warning a session store extension gives an application
(``SESSIONS_NOT_RUNS``), whose runs should resume by themselves.
"""

from __future__ import annotations

from orchestrator.extensions.sqlite_store import SQLiteSessionStore

__all__ = ["TerminalSessionStore"]


class TerminalSessionStore(SQLiteSessionStore):
    """``SQLiteSessionStore`` as the terminal keeps it, without the warning meant for applications."""

    deprecated = False

"""Forking a stored session: a new session holding its messages up to now, or up to an earlier turn."""

from __future__ import annotations

from orchestrator.messages import Message, UserMessage
from orchestrator.store.interface import SessionChange, SessionStore
from orchestrator.store.restore import read_row


class ForkRefused(ValueError):
    """A fork that cannot be made: ``reason`` says why, ``kind`` which case it is.

    ``kind`` is ``"unknown"`` (no such session), ``"exists"`` (the target is taken) or ``"turn"`` (no such turn).
    """

    def __init__(self, reason: str, kind: str = "unknown") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


def turn_starts(messages: list[Message]) -> list[int]:
    """The positions where each turn begins (its user message)."""
    return [index for index, message in enumerate(messages) if isinstance(message, UserMessage)]


def first_turns(source: str, messages: list[Message], turns: int | None) -> list[Message]:
    """``messages`` up to the end of turn ``turns`` (all of them when None); ForkRefused when there is no such turn."""
    if turns is None:
        return messages
    starts = turn_starts(messages)
    if not 1 <= turns <= len(starts):
        raise ForkRefused(f"the session {source!r} has {len(starts)} turns; fork from turn 1 to {len(starts)}", "turn")
    return messages if turns == len(starts) else messages[: starts[turns]]


def fork_session(store: SessionStore, source: str, target: str, *, turns: int | None = None) -> int:
    """Copy ``source``'s messages into the new session ``target``; with ``turns``, only its first ``turns`` turns.

    Returns how many messages the fork holds. Pending approvals and Plan Mode are not copied: the fork starts
    idle. Raises ForkRefused when ``source`` is not stored, ``target`` already is, or ``turns`` is out of range.
    """
    stored = store.sessions()
    if source not in stored:
        raise ForkRefused(f"no stored session {source!r} to fork")
    if target in stored:
        raise ForkRefused(f"the session {target!r} exists already", "exists")
    messages = first_turns(source, [read_row(row)[0] for row in store.rows(source)], turns)
    store.apply(target, SessionChange(replace=tuple(messages)))
    return len(messages)

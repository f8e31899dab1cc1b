"""Restoring a session a process left behind, as the next runner finds it.

``restore_session`` reads a session's rows and recorded waits and makes what
was left whole, in one ``apply``: rows that do not decode are set aside and
read as placeholders (each reported in the log with its row id); a call that
waited for an approval answered since gets its result from that answer
(``WaitRule.settle``, the answer checked again like a live one); every other
call without a result gets a cancelled one (``repair``); every recorded wait
of the session ends; Plan Mode follows the answers (a proposal nobody
answered is withdrawn). Results stay where their call was recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import attrs

from orchestrator.messages import AssistantMessage, Message, ToolCall, ToolMessage
from orchestrator.runtime.pending import SettledAnswer, WaitRule
from orchestrator.runtime.tool_runner import no_longer_available
from orchestrator.store.codec import UndecodableMessage, decode_message, placeholder
from orchestrator.store.interface import PendingApproval, SessionChange, SessionStore, StoredRow, Unreadable
from orchestrator.store.repair import repair

__all__ = ["Restored", "read_row", "restore_session"]

log = logging.getLogger("orchestrator.store")

# Plan Mode a proposal nobody answered returns to when its process stopped.
_WITHDRAWN = {"entry_awaiting_approval": "normal", "exit_awaiting_approval": "plan_active"}


@attrs.frozen
class Restored:
    """A restored session: its mended history and what the restore did."""

    messages: list[Message]
    next_position: int  # where the next appended message goes
    unreadable: tuple[Unreadable, ...]
    settled: tuple[tuple[PendingApproval, SettledAnswer], ...]
    plan_mode: str


def read_row(row: StoredRow) -> tuple[Message, Unreadable | None]:
    """The row's message, or its placeholder and why it did not decode."""
    try:
        return decode_message(row.body), None
    except UndecodableMessage as bad:
        reason = str(bad)
        stand_in = placeholder(row.row_id, reason)
        return stand_in, Unreadable(row.row_id, reason, stand_in)


def _latest_calls(messages: Sequence[Message]) -> dict[str, ToolCall]:
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if isinstance(message, AssistantMessage):
            calls.update((c.id, c) for c in message.tool_calls)
    return calls


def _settle_answers(
    messages: Sequence[Message],
    waits: Sequence[PendingApproval],
    rules: Mapping[str, WaitRule],
    gone: frozenset[str] = frozenset(),
) -> dict[str, tuple[PendingApproval, SettledAnswer, ToolMessage]]:
    """Results from the answers recorded for the waits of a stopped process; an answered call of a tool in
    ``gone`` (the agent has it no more) fails saying so."""
    calls = _latest_calls(messages)
    found: dict[str, tuple[PendingApproval, SettledAnswer, ToolMessage]] = {}
    for wait in waits:
        rule = rules.get(wait.response_event)
        call = calls.get(wait.tool_call_id)
        if wait.response is None or rule is None or call is None:
            continue
        if call.name in gone:
            settled = SettledAnswer(no_longer_available(call.name), "failed")
            found[call.id] = (wait, settled, ToolMessage(call.id, call.name, settled.content, settled.status))
            continue
        problem = rule.validator(wait.payload)(wait.response)
        if problem is not None:
            log.warning("recorded answer to %s of %s ignored: %s", call.id, wait.session_id, problem)
            continue
        settled = rule.settle(wait.payload, wait.response)
        found[call.id] = (wait, settled, ToolMessage(call.id, call.name, settled.content, settled.status))
    return found


def restore_session(
    store: SessionStore, session_id: str, rules: Mapping[str, WaitRule], gone: frozenset[str] = frozenset()
) -> Restored:
    """Load, mend and store the session (blocking: run it in a worker thread; hold the session).

    ``gone``: tools the session's waiting calls were made for that the restoring agent has no more.
    """
    rows = store.rows(session_id)
    messages: list[Message] = []
    unreadable: list[Unreadable] = []
    for row in rows:
        message, bad = read_row(row)
        messages.append(message)
        if bad is not None:
            unreadable.append(bad)
            log.warning("stored message %d of session %s is unreadable: %s", row.row_id, session_id, bad.reason)
    waits = store.pending_approvals(session_id)
    answers = _settle_answers(messages, waits, rules, gone)
    repaired = repair(messages, answers={call_id: entry[2] for call_id, entry in answers.items()})
    used = [entry for entry in answers.values() if any(m is entry[2] for m in repaired)]
    recorded = store.plan_mode(session_id)
    mode: str | None = _WITHDRAWN.get(recorded)
    for _, settled, _ in used:
        mode = settled.plan_mode or mode
    drop = frozenset(w.tool_call_id for w in waits)
    if repaired[: len(messages)] == messages:
        base = rows[-1].position + 1 if rows else 0
        extra = repaired[len(messages) :]
        change = SessionChange(tuple(unreadable), None, tuple((base + i, m) for i, m in enumerate(extra)), drop, mode)
        next_position = base + len(extra)
    else:
        change = SessionChange(tuple(unreadable), tuple(repaired), (), drop, mode)
        next_position = len(repaired)
    if change != SessionChange():
        store.apply(session_id, change)
    settled_pairs = tuple((wait, settled) for wait, settled, _ in used)
    return Restored(repaired, next_position, tuple(unreadable), settled_pairs, mode or recorded)

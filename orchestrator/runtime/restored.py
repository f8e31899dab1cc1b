"""Restored: where a request resumed from a run store's checkpoint picks up."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from machines.values import FieldValues
from orchestrator.limits import RunUsage
from orchestrator.messages import AssistantMessage
from orchestrator.model import StopReason


@attrs.frozen(eq=False, repr=False)  # FieldValues: attrs' eq, hash and repr, shared
class Restored(FieldValues):
    """Where a run resumed from a run store's checkpoint picks up.

    ``response`` is the last assistant message of the session's history (None when
    the run had not had one), ``open_calls`` the ids of its calls without a result,
    ``asked`` those of its calls whose question the run's log already holds (waiting again,
    they are not announced a second time),
    ``last_seq`` the seq of the last event the run's log kept, ``stop_reason`` why
    that response ended (a response cut off at ``max_tokens`` runs none of its calls,
    also after a restore), ``expiries`` the deadline (seconds since the epoch) each wait that
    expires had: waiting again, it keeps that deadline instead of starting a new one, and
    ``spent`` what the run spent before (its usage limits count it too); ``fingerprint`` the
    stored fingerprint (JSON text) of the agent that carried the run so far (None when none was stored), and
    ``deadline_left`` the running time its deadline had left (its clock does not start again from the whole).
    """

    worker: str
    last_seq: int
    iterations: int
    response: AssistantMessage | None
    open_calls: tuple[str, ...]
    stop_reason: StopReason = "end_turn"
    asked: tuple[str, ...] = ()
    expiries: Mapping[str, float] = attrs.field(factory=dict)
    spent: RunUsage | None = None
    fingerprint: str | None = None
    deadline_left: float | None = None

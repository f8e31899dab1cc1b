"""A run's checkpoint: what a worker needs to pick the run up where another left it.

The session's history (in the store, written by the same fenced commits) holds
the messages; the checkpoint holds the rest: the request machine's states, the
iteration count, the calls that recorded an intent (started and not yet
settled), the calls that wait for an answer (with the question asked and its
expiry, so a resumed wait keeps its deadline), each
open call's phase in the call ledger and the answer it consumed, what the run spent
(when it has usage limits, which then count it after a resume), the
session's Plan Mode state and why the last response ended. ``restored`` reads both back into the point where
the request loop resumes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from orchestrator.errors import AgentError
from orchestrator.limits import RunUsage
from orchestrator.messages import AssistantMessage, Message, ToolCall, ToolMessage, ToolStatus
from orchestrator.model import STOP_REASONS, StopReason, Usage
from orchestrator.runtime.restored import Restored

VERSION = 1

PHASES = ("waiting", "answered", "executing")
"""The call ledger's phases of an open call, as a checkpoint records them.

- ``waiting``: its question was asked and no answer consumed;
- ``answered``: an answer was consumed (in the commit that records this phase) and its tool body
  was not entered after it: a resumed run gives it that answer again when it asks, never a person;
- ``executing``: its tool body was entered (committed before the body runs): a resumed run treats
  it as cut off mid-way unless its tool is idempotent.
"""


@attrs.frozen
class Waiting:
    """A call that waits for an external answer: the question event, what answers it, and until when
    (``expires_at``, seconds since the epoch; None: the wait never expires)."""

    tool_call_id: str
    event: str
    payload: Mapping[str, Any]
    response_event: str
    expires_at: float | None = None
    session_id: str | None = None  # a subagent's session, for a wait of a child request; None for the run's own

    def json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "tool_call_id": self.tool_call_id,
            "event": self.event,
            "payload": dict(self.payload),
            "response_event": self.response_event,
        }
        if self.expires_at is not None:
            body["expires_at"] = self.expires_at
        if self.session_id is not None:
            body["session_id"] = self.session_id
        return body


@attrs.frozen
class Checkpoint:
    states: Mapping[str, str]
    iterations: int
    input_recorded: bool
    started: tuple[str, ...]
    waiting: tuple[Waiting, ...]
    plan_mode: str | None
    stop_reason: StopReason = "end_turn"  # why the last response ended (max_tokens: its calls never run)
    phases: Mapping[str, str] | None = None  # call id -> PHASES; None in a checkpoint written before the ledger
    answers: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)  # call id -> the answer it consumed
    expired: Mapping[str, str] = attrs.field(factory=dict)  # call id -> why a late answer is refused
    spent: RunUsage | None = None  # what the run spent so far, when it counts (it has usage limits)
    deadline_left: float | None = None  # the running time its deadline has left, when it has one
    # Questions of the run's subagents that wait (the child requests run in the process holding the run):
    # listed and answered through any web node while that process holds it; a resumed run has none.
    children: tuple[Waiting, ...] = ()

    def json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "states": dict(self.states),
            "iterations": self.iterations,
            "input_recorded": self.input_recorded,
            "started": list(self.started),
            "waiting": [w.json() for w in self.waiting],
            "plan_mode": self.plan_mode,
            "stop_reason": self.stop_reason,
            "phases": dict(self.phases or {}),
            "answers": {call_id: dict(answer) for call_id, answer in self.answers.items()},
            "expired": dict(self.expired),
            **({"spent": _spent_json(self.spent)} if self.spent is not None else {}),
            **({"deadline_left": self.deadline_left} if self.deadline_left is not None else {}),
            "children": [w.json() for w in self.children],
        }

    def phase(self, call_id: str) -> str | None:
        """The ledger phase of open call ``call_id`` (None: only its intent is recorded, or no ledger)."""
        return (self.phases or {}).get(call_id)

    def unanswered(self) -> tuple[Waiting, ...]:
        """The waits whose question has no answer consumed yet (what a person may still answer)."""
        return tuple(w for w in self.waiting if self.phase(w.tool_call_id) in (None, "waiting"))

    def wake_at(self) -> float | None:
        """The earliest ``expires_at`` of the unanswered waits: when the parked run must be taken up again."""
        expiries = [w.expires_at for w in self.unanswered() if w.expires_at is not None]
        return min(expiries) if expiries else None


def expired_reason(tool_call_id: str, expires_at: float) -> str:
    """Why a late answer to call ``tool_call_id``, whose wait expired at ``expires_at``, is refused."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires_at))
    return f"call tool_call_id={tool_call_id!r} expired: nobody answered it by {when}"


class UnreadableCheckpoint(AgentError):
    """A run's stored checkpoint or input cannot be read back, so the run cannot be resumed: ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the run cannot be resumed: {reason}")


def read(data: Mapping[str, Any] | None) -> Checkpoint | None:
    """The checkpoint a store row holds (None for a run that never wrote one); UnreadableCheckpoint when malformed."""
    if not data:
        return None
    try:
        return _checkpoint(data)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UnreadableCheckpoint(f"its checkpoint is malformed ({type(error).__name__}: {error})") from None


def _checkpoint(data: Mapping[str, Any]) -> Checkpoint:
    return Checkpoint(
        states=dict(data.get("states", {})),
        iterations=int(data.get("iterations", 0)),
        input_recorded=bool(data.get("input_recorded", False)),
        started=tuple(str(i) for i in data.get("started", ())),
        waiting=tuple(_waiting(w) for w in data.get("waiting", ())),
        children=tuple(_waiting(w) for w in data.get("children", ())),
        plan_mode=data.get("plan_mode"),
        stop_reason=_stop_reason(data.get("stop_reason")),
        phases=_phases(data["phases"]) if "phases" in data else None,
        answers={str(k): dict(v) for k, v in dict(data.get("answers", {})).items()},
        expired={str(k): str(v) for k, v in dict(data.get("expired", {})).items()},
        spent=_spent(data["spent"]) if data.get("spent") is not None else None,
        deadline_left=float(data["deadline_left"]) if data.get("deadline_left") is not None else None,
    )


def _waiting(data: Mapping[str, Any]) -> Waiting:
    session = data.get("session_id")
    return Waiting(
        str(data["tool_call_id"]),
        str(data["event"]),
        dict(data.get("payload", {})),
        str(data["response_event"]),
        float(data["expires_at"]) if data.get("expires_at") is not None else None,
        None if session is None else str(session),
    )


def _spent_json(spent: RunUsage) -> dict[str, Any]:
    return {
        "model_calls": [[u.input_tokens, u.output_tokens] for u in spent.model_calls],
        "per_tool": dict(spent.per_tool),
        "subagents": [spent.subagents.input_tokens, spent.subagents.output_tokens],
    }


def _spent(data: Mapping[str, Any]) -> RunUsage:
    calls = tuple(Usage(int(i), int(o)) for i, o in data.get("model_calls", ()))
    per_tool = {str(tool): int(count) for tool, count in dict(data.get("per_tool", {})).items()}
    subagents = Usage(*(int(n) for n in data.get("subagents", (0, 0))))
    return RunUsage(calls, per_tool, subagents)


def _phases(value: Any) -> dict[str, str]:
    phases = {str(call_id): str(phase) for call_id, phase in dict(value).items()}
    for call_id, phase in phases.items():
        if phase not in PHASES:
            raise ValueError(f"call {call_id!r} has the phase {phase!r}, not one of {', '.join(PHASES)}")
    return phases


def _stop_reason(value: object) -> StopReason:
    """A stored stop reason; one written before stop reasons were kept is ``end_turn``."""
    for known in STOP_REASONS:
        if value == known:
            return known
    return "end_turn"


CANCELLED_BEFORE_RUN = "not completed: request cancelled"
CANCELLED_MID_CALL = (
    "not completed: request cancelled while this call ran, so it may or may not have taken effect;"
    " check before calling it again"
)


def open_calls(history: Sequence[Message]) -> list[ToolCall]:
    """The calls of the last assistant message of ``history`` still without a result, in call order."""
    response, open_ids = _open(history)
    return [c for c in response.tool_calls if c.id in open_ids] if response is not None else []


def cancelled_results(checkpoint: Checkpoint | None, history: Sequence[Message]) -> list[ToolMessage]:
    """A cancelled result for each open call of a run ended while nobody ran it, in call order.

    A call whose body was entered (or, in a checkpoint from before the ledger, whose intent is
    recorded and which did not wait) may or may not have taken effect, and says so.
    """
    results = []
    for call in open_calls(history):
        if checkpoint is None:
            cut = False
        elif checkpoint.phases is None:
            cut = call.id in checkpoint.started and call.id not in {w.tool_call_id for w in checkpoint.waiting}
        else:
            cut = checkpoint.phase(call.id) == "executing"
        text = CANCELLED_MID_CALL if cut else CANCELLED_BEFORE_RUN
        results.append(ToolMessage(call.id, call.name, text, ToolStatus.CANCELLED))
    return results


def _open(history: Sequence[Message]) -> tuple[AssistantMessage | None, tuple[str, ...]]:
    response: AssistantMessage | None = None
    settled: set[str] = set()
    for message in reversed(history):
        if isinstance(message, ToolMessage):
            settled.add(message.tool_call_id)
        elif isinstance(message, AssistantMessage):
            response = message
            break
        else:
            break  # the turn ended with a user message (input or steering): the next model call is due
    open_ids = tuple(c.id for c in response.tool_calls if c.id not in settled) if response is not None else ()
    if response is not None and response.tool_calls and not open_ids:
        response = None  # every call settled: between turns
    return response, open_ids


def restored(
    checkpoint: Checkpoint,
    history: Sequence[Message],
    *,
    worker: str,
    last_seq: int,
    fingerprint: str | None = None,
) -> Restored:
    """Where the loop resumes: the last assistant message of ``history`` and its calls still without a result;
    ``fingerprint``: the run's stored agent fingerprint."""
    response, open_ids = _open(history)
    asked = tuple(w.tool_call_id for w in checkpoint.waiting)
    expiries = {w.tool_call_id: w.expires_at for w in checkpoint.waiting if w.expires_at is not None}
    return Restored(
        worker,
        last_seq,
        checkpoint.iterations,
        response,
        open_ids,
        checkpoint.stop_reason,
        asked,
        expiries,
        checkpoint.spent,
        fingerprint,
        checkpoint.deadline_left,
    )

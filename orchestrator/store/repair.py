"""Well-formed history: every tool call answered exactly once, right after its message.

A history is well-formed when each assistant message with tool calls is
followed directly by one result per call (in any order) and no other tool
result appears anywhere. The runtime only ever records such histories; a
killed process, a model reusing call ids across turns, or a row that could not
be read leaves them broken. ``repair`` mends any list of messages into a
well-formed one, keeping every message it can:

- a call without a result gets one: the answer given for it (``answers``), or
  a cancelled result saying the process stopped;
- a result recorded after a later message of its turn is moved up to the
  other results; other messages of the turn follow the results, in order;
- a result that answers no call of its turn is kept as a marked user message.

Calls are matched per assistant message, so an id reused in a later turn
never counts as answered by an earlier result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    describe_parts,
)

__all__ = ["STOPPED", "problems", "repair"]

STOPPED = "not completed: the process stopped"


def _stray(result: ToolMessage) -> UserMessage:
    return UserMessage(
        f"[result of tool call {result.tool_call_id} ({result.name}), whose call is not in the history: "
        f"{describe_parts(result.content)}]"
    )


def _turns(messages: Sequence[Message]) -> list[tuple[AssistantMessage | None, list[Message]]]:
    """Each assistant message with what follows it up to the next one (the first turn has none)."""
    turns: list[tuple[AssistantMessage | None, list[Message]]] = [(None, [])]
    for message in messages:
        if isinstance(message, AssistantMessage):
            turns.append((message, []))
        else:
            turns[-1][1].append(message)
    return turns


def repair(
    messages: Sequence[Message],
    keep_open: frozenset[str] = frozenset(),
    answers: Mapping[str, ToolMessage] | None = None,
) -> list[Message]:
    """``messages`` made well-formed (see the module); calls in ``keep_open`` of the last turn stay open.

    ``answers`` gives the result of a call of the latest assistant message that
    holds its id; every other missing result is cancelled (``STOPPED``).
    """
    answers = answers or {}
    turns = _turns(messages)
    last_turn_of: dict[str, int] = {}
    for index, (assistant, _) in enumerate(turns):
        for call in assistant.tool_calls if assistant is not None else ():
            last_turn_of[call.id] = index
    repaired: list[Message] = []
    for index, (assistant, rest) in enumerate(turns):
        calls: dict[str, ToolCall] = {c.id: c for c in assistant.tool_calls} if assistant is not None else {}
        results: dict[str, ToolMessage] = {}
        others: list[Message] = []
        for message in rest:
            if not isinstance(message, ToolMessage):
                others.append(message)
            elif message.tool_call_id in calls and message.tool_call_id not in results:
                results[message.tool_call_id] = message
            else:
                others.append(_stray(message))
        if assistant is not None:
            repaired.append(assistant)
        repaired.extend(results.values())
        last = index == len(turns) - 1
        for call_id, call in calls.items():
            if call_id in results or (last and call_id in keep_open):
                continue
            answer = answers.get(call_id) if last_turn_of.get(call_id) == index else None
            repaired.append(answer or ToolMessage(call.id, call.name, STOPPED, ToolStatus.CANCELLED))
        repaired.extend(others)
    return repaired


def problems(messages: Sequence[Message]) -> list[str]:
    """Why ``messages`` is not well-formed (an empty list when it is)."""
    found: list[str] = []
    waiting: dict[str, ToolCall] = {}
    for position, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            if waiting.pop(message.tool_call_id, None) is None:
                found.append(f"message {position}: result for {message.tool_call_id!r} answers no open call")
            continue
        if waiting:
            found.append(f"message {position}: calls {sorted(waiting)} have no result before it")
            waiting = {}
        if isinstance(message, AssistantMessage):
            waiting = {c.id: c for c in message.tool_calls}
    if waiting:
        found.append(f"end: calls {sorted(waiting)} have no result")
    return found

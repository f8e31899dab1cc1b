"""Questions a run asks on the terminal, and how a typed line answers each one."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

QUESTION_EVENTS = frozenset({"enter_plan_mode", "exit_plan_mode", "ask_user", "tool_approval"})

_YES = ("y", "yes")
_NO = ("n", "no")
_ALWAYS = ("a", "always")


@attrs.frozen
class Question:
    """What to print, and the hint repeated when a line does not answer it."""

    prompt: str
    hint: str
    plan: str | None = None


def question_of(name: str, payload: Mapping[str, Any], call_text: str = "") -> Question:
    if name == "enter_plan_mode":
        return Question(f"? Enter Plan Mode? reason: {payload.get('reason', '')} [y/n]", "please answer y or n")
    if name == "exit_plan_mode":
        return Question("? Approve this plan? [y/n]", "please answer y or n", plan=str(payload.get("plan", "")))
    if name == "tool_approval":
        return Question(
            f"? Allow {call_text}? [y]es / [n]o, optionally with a reason / [a]lways in this session",
            "please answer y, n (a reason may follow) or a",
        )
    options = tuple(str(o) for o in payload.get("options") or ())
    listed = "  ".join(f"{i}) {o}" for i, o in enumerate(options, 1))
    prompt = f"? {payload.get('question', '')}" + (f"  {listed}" if options else "")
    hint = f"please answer with a number or one of: {', '.join(options)}" if options else "please answer"
    return Question(prompt, hint)


def _first_word(text: str) -> tuple[str, str]:
    match = re.match(r"\s*([A-Za-z]+)\b[\s,:;.-]*(.*)", text, re.DOTALL)
    if match is None:
        return "", text.strip()
    return match.group(1).lower(), match.group(2).strip()


def answer_of(name: str, payload: Mapping[str, Any], text: str) -> dict[str, Any] | None:
    """The response payload ``text`` gives, or None when it does not answer the question."""
    call_id = payload["tool_call_id"]
    if name in ("enter_plan_mode", "exit_plan_mode"):
        choice = text.strip().lower()
        if choice in _YES or choice in _NO:
            return {"tool_call_id": call_id, "approved": choice in _YES}
        return None
    if name == "tool_approval":
        word, rest = _first_word(text)
        if word in _YES and not rest:
            return {"tool_call_id": call_id, "approved": True, "remember": None}
        if word in _ALWAYS and not rest:
            return {"tool_call_id": call_id, "approved": True, "remember": "session"}
        if word in _NO:
            return {"tool_call_id": call_id, "approved": False, "remember": None, "reason": rest or None}
        return None
    answer = text.strip()
    options = tuple(str(o) for o in payload.get("options") or ())
    if options:
        if answer.isdigit() and 1 <= int(answer) <= len(options):
            answer = options[int(answer) - 1]
        elif answer not in options:
            return None
    return {"tool_call_id": call_id, "answer": answer}


def declined(name: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The answer given when input ends before a yes/no question is answered (None: cancel instead)."""
    if name in ("enter_plan_mode", "exit_plan_mode"):
        return {"tool_call_id": payload["tool_call_id"], "approved": False}
    if name == "tool_approval":
        return {"tool_call_id": payload["tool_call_id"], "approved": False, "reason": "input ended"}
    return None

"""What an id a client sends may be, checked where it enters: one rule for every route and backend.

Session ids, request ids, call ids (``tool_call_id``), event names and Idempotency-Keys are 1 to
``MAX_ID_LENGTH`` characters, not all blank, without control characters (NUL, line breaks, DEL and
the C1 range) or lone surrogates: such a character cannot be stored by every run store (PostgreSQL
refuses NUL in text) and has no business in a name. A refused id is a 400 before any store sees it.
"""

from __future__ import annotations

import unicodedata

from orchestrator.server.errors import bad_request

MAX_ID_LENGTH = 200
_REFUSED_CATEGORIES = {"Cc": "a control character", "Cs": "a lone surrogate"}


def id_problem(value: object) -> str | None:
    """Why ``value`` is not an acceptable id, or None when it is one."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not value.strip() or len(value) > MAX_ID_LENGTH:
        return f"must be 1 to {MAX_ID_LENGTH} characters, not all blank"
    if value.isascii() and value.isprintable():  # the usual id, and one without a refused character
        return None
    for position, character in enumerate(value):
        kind = _REFUSED_CATEGORIES.get(unicodedata.category(character))
        if kind is not None:
            return f"must not contain {kind} ({character!a} at position {position})"
    return None


def checked_id(value: object, what: str) -> str:
    """``value`` when it is an acceptable id; otherwise a 400 naming ``what`` and the reason."""
    problem = id_problem(value)
    if problem is not None:
        raise bad_request(f"{what} {problem}")
    assert isinstance(value, str)
    return value

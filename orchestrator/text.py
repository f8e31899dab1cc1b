"""Text that can always be encoded as UTF-8.

Python strings may hold surrogate code points (U+D800..U+DFFF): JSON ``\\ud83d``
escapes decoded one chunk at a time, file names holding bytes that are not
UTF-8 (``os.fsdecode`` maps them to ``\\udc80``..``\\udcff``), or user input.
Such a string cannot be written as UTF-8, so it breaks every encoder it
reaches later (a database row, an HTTP body). ``clean_text`` is applied where
text enters the library; ``SurrogateJoiner`` does the same for text that
arrives in pieces, so a pair split between two pieces is kept whole.
"""

from __future__ import annotations

from typing import Any

__all__ = ["REPLACEMENT_CHARACTER", "SurrogateJoiner", "clean_json", "clean_text", "clean_value"]

REPLACEMENT_CHARACTER = "\ufffd"


def _is_high_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


def clean_text(text: str) -> str:
    """``text`` with every surrogate pair joined into its character and every lone
    surrogate replaced by U+FFFD, so the result always encodes as UTF-8.

    Text without surrogates is returned unchanged (the same object).
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def clean_json(value: Any) -> Any:
    """A JSON value (as ``json.loads`` returns it) with ``clean_text`` applied to every
    string in it, keys included. A value that is already clean is returned unchanged."""
    import json  # loaded on first use: running a request does not need it

    encoded = json.dumps(value, ensure_ascii=False)
    cleaned = clean_text(encoded)
    return value if cleaned is encoded else json.loads(cleaned)


def clean_value(value: Any) -> Any:
    """Any Python value with ``clean_text`` applied to every string inside it.

    Unlike ``clean_json`` it takes what a Model object hands over directly, not
    only JSON: it walks dicts (keys and values), lists and tuples, and returns
    anything else as it is. A value with nothing to clean is returned unchanged
    (the same object); a container met again inside itself (a cycle) is left as
    it is there. Nesting deeper than the interpreter's recursion limit raises
    RecursionError.
    """
    return _clean_value(value, set())


def _clean_value(value: Any, active: set[int]) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (dict, list, tuple)) or id(value) in active:
        return value
    active.add(id(value))
    try:
        if isinstance(value, dict):
            cleaned: dict[Any, Any] = {}
            changed = False
            for key, item in value.items():
                new_key, new_item = _clean_value(key, active), _clean_value(item, active)
                changed = changed or new_key is not key or new_item is not item
                cleaned[new_key] = new_item
            return cleaned if changed else value
        items = [_clean_value(item, active) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    finally:
        active.discard(id(value))


class SurrogateJoiner:
    """Cleans text that arrives in pieces (streamed deltas).

    ``feed`` returns the clean text of everything fed so far, except a trailing
    high surrogate, which it holds back in case the next piece starts with its
    low half. ``flush`` returns what is held back (as U+FFFD: the stream ended
    inside a pair).
    """

    __slots__ = ("held",)

    def __init__(self) -> None:
        #: The high surrogate held back ("" when none). While it is empty, an ASCII
        #: piece is released as it is: a caller may skip ``feed`` for one.
        self.held = ""

    def feed(self, piece: str) -> str:
        """The clean text that can be released after ``piece``."""
        if not self.held and not (piece and _is_high_surrogate(piece[-1])):
            return clean_text(piece)
        text = self.held + piece
        self.held = ""
        if text and _is_high_surrogate(text[-1]):
            text, self.held = text[:-1], text[-1]
        return clean_text(text)

    def flush(self) -> str:
        """What is still held back, cleaned (a lone high surrogate becomes U+FFFD)."""
        text, self.held = self.held, ""
        return clean_text(text)

    @property
    def pending(self) -> bool:
        """Whether a high surrogate is being held back."""
        return bool(self.held)

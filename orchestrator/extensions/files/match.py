"""Bounded pattern matching for grep and glob.

Both compile to RE2 (``google-re2``), an automaton engine whose matching time
is linear in the text's length for any pattern: no backtracking, so no pattern
can stall the process. RE2's syntax is Python's without backreferences and
lookaround (``\\d``, ``\\w`` and ``\\s`` are ASCII); a pattern RE2 cannot run,
one longer than MAX_PATTERN_CHARS, or one whose compiled program exceeds
RE2_MAX_MEM bytes is a ValueError that names the reason.
"""

from __future__ import annotations

from typing import Any, Protocol

import re2  # type: ignore[import-untyped]

MAX_PATTERN_CHARS = 1_000
"""Longest grep regular expression or glob pattern accepted."""
RE2_MAX_MEM = 8 << 20
"""Memory RE2 may use for one compiled pattern (its program and DFA cache), in bytes."""


class Matcher(Protocol):
    def search(self, text: str) -> Any: ...

    def fullmatch(self, text: str) -> Any: ...


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    return options


def compile_regex(pattern: str, what: str = "regular expression") -> Matcher:
    """``pattern`` compiled by RE2; ValueError with the reason when it cannot be."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the {what} is {len(pattern)} characters long; the limit is {MAX_PATTERN_CHARS}")
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"the {what} is not valid UTF-8 text (it holds a lone surrogate)") from None
    try:
        compiled: Matcher = re2.compile(pattern, _options())
    except re2.error as problem:
        re2.purge()
        reason = problem.args[0] if problem.args else problem
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(f"invalid {what}: {reason} (RE2 syntax: no backreferences or lookaround)") from None
    # re2.compile keeps the last 128 patterns, each with a DFA cache of up to RE2_MAX_MEM:
    # model-chosen patterns are used once, so none is kept beyond the call that uses it.
    re2.purge()
    return compiled


def _escape(char: str) -> str:
    return char if char.isalnum() or char == "_" or not char.isascii() else "\\" + char


def glob_to_regex(pattern: str) -> str:
    """RE2 source for a glob over ``/``-separated paths: ``*``, ``?``, ``[...]``, ``**``."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            inner = "".join(char if char == "-" else _escape(char) for char in body)
            out.append("[" + ("^" if negate else "") + inner + "]")
            i = end + 1
        else:
            out.append(_escape(pattern[i]))
            i += 1
    return "".join(out)


def compile_glob(pattern: str) -> Matcher:
    """A glob compiled for ``fullmatch`` against relative paths; ValueError when it is invalid."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the glob pattern is {len(pattern)} characters long; the limit is {MAX_PATTERN_CHARS}")
    return compile_regex("(?s)" + glob_to_regex(pattern), "glob pattern")

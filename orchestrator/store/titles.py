"""Session titles: the first input, shortened, unless one was set; set titles live in ``<db>.titles.json``."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence

from orchestrator.messages import Message, UserMessage

TITLE_LENGTH = 60


def _file(db: str) -> str:
    return db + ".titles.json"


def _shorten(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def set_titles(db: str) -> dict[str, str]:
    """The titles set by hand, by session id (none when the file is missing or unreadable)."""
    try:
        with open(_file(db), encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {key: value for key, value in found.items() if isinstance(key, str) and isinstance(value, str)}


def set_title(db: str, session_id: str, title: str) -> None:
    """Give ``session_id`` the title ``title`` (written whole, then moved into place); OSError when the titles
    file cannot be written (nothing is left behind)."""
    titles = set_titles(db)
    titles[session_id] = title
    temporary = _file(db) + f".{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(titles, handle, ensure_ascii=False, indent=1)
        os.replace(temporary, _file(db))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def forget_titles(db: str, session_ids: Sequence[str]) -> None:
    """Drop the titles set for ``session_ids`` (the file is written again only when one had a title)."""
    titles = set_titles(db)
    kept = {key: value for key, value in titles.items() if key not in set(session_ids)}
    if len(kept) == len(titles):
        return
    temporary = _file(db) + f".{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(kept, handle, ensure_ascii=False, indent=1)
    os.replace(temporary, _file(db))


def forked_title(title: str) -> str:
    """The title a fork of a session titled ``title`` gets."""
    return f"{title} (fork)"


def first_input_title(messages: Sequence[Message]) -> str:
    """The session's first input on one line, shortened to TITLE_LENGTH ("" when it has none)."""
    first = next((m.text for m in messages if isinstance(m, UserMessage)), "")
    return _shorten(first, TITLE_LENGTH)


def title_of(db: str, session_id: str, messages: Sequence[Message], titles: dict[str, str] | None = None) -> str:
    """The title set for ``session_id``, else its first input shortened, else ""."""
    chosen = (set_titles(db) if titles is None else titles).get(session_id)
    return chosen if chosen is not None else first_input_title(messages)

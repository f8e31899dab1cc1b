"""Who owns each session of a one-process SQLite session store: ``<db>.owners.json``, beside its set titles.

Only sessions started for a principal other than ``LOCAL_PRINCIPAL`` are listed; a session the store knows
and the file does not list belongs to ``LOCAL_PRINCIPAL`` (it was kept before identities were in use).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping

_writing = threading.Lock()


def _file(db: str) -> str:
    return db + ".owners.json"


def read_owners(db: str) -> dict[str, str]:
    """The recorded owners, by session id (none when the file is missing)."""
    try:
        with open(_file(db), encoding="utf-8") as handle:
            found = json.load(handle)
    except FileNotFoundError:
        return {}
    if not isinstance(found, dict):
        raise ValueError(f"{_file(db)} holds no JSON object of session owners")
    return {key: value for key, value in found.items() if isinstance(key, str) and isinstance(value, str)}


def write_owners(db: str, owners: Mapping[str, str]) -> None:
    """Write ``owners`` whole (to a file of its own, then moved into place: a reader never sees half of it).

    ``owners`` is copied once the writers' lock is held, so of two writes the later holds both's changes."""
    with _writing:
        copied = dict(owners)
        temporary = _file(db) + f".{os.getpid()}.{threading.get_ident()}"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(copied, handle, ensure_ascii=False, indent=1)
        os.replace(temporary, _file(db))

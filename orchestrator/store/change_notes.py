"""The payloads of the PostgreSQL run store's change notifications: every run one transaction changed, in one.

A payload is a JSON object (ASCII only) that maps each topic (``run``, ``inbox``) to the request ids
of that topic the transaction changed, e.g. ``{"inbox":["r7"],"run":["r1","r2"]}``. Keys that do not
fit in one payload (PostgreSQL takes fewer than ``PAYLOAD_LIMIT`` bytes) go in as many as they need.
A payload that is not such an object (``EVERYTHING`` is sent when one key alone would not fit) says
that anything may have changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

PAYLOAD_LIMIT = 8000
"""PostgreSQL refuses a ``NOTIFY`` payload of this many bytes or more."""
PAYLOAD_BYTES = 7900
"""Most bytes a payload is made of here (below ``PAYLOAD_LIMIT``, with room to spare)."""
EVERYTHING = "*"
"""The payload that says anything may have changed."""

_compact = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def change_payloads(keys: Iterable[tuple[str, str]], limit: int = PAYLOAD_BYTES) -> list[str]:
    """The payloads naming every (topic, request id) of ``keys``, each at most ``limit`` bytes: one when they
    fit in one; ``[EVERYTHING]`` when one of them would not fit alone."""
    payloads: list[str] = []
    chunk: dict[str, list[str]] = {}
    size = 2  # the braces
    for topic, request_id in sorted(keys):
        quoted = _compact(request_id)
        cost = len(quoted) + 1  # the id and a comma
        if topic not in chunk:
            cost += len(_compact(topic)) + 4  # the topic, its colon, its brackets and a comma
        if cost + 2 > limit:
            return [EVERYTHING]
        if size + cost > limit:
            payloads.append(_joined(chunk))
            chunk, size = {}, 2
            cost = len(quoted) + 1 + len(_compact(topic)) + 4
        chunk.setdefault(topic, []).append(quoted)
        size += cost
    if chunk:
        payloads.append(_joined(chunk))
    return payloads


def _joined(chunk: dict[str, list[str]]) -> str:
    """The JSON object of ``chunk``, whose ids are JSON strings already."""
    return "{" + ",".join(f"{_compact(topic)}:[{','.join(ids)}]" for topic, ids in chunk.items()) + "}"


def changed_keys(payload: str) -> frozenset[tuple[str, str]] | None:
    """The (topic, request id) pairs a payload names; None when it says anything may have changed (``EVERYTHING``,
    or a payload this version cannot read)."""
    try:
        named = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(named, dict):
        return None
    keys: set[tuple[str, str]] = set()
    for topic, request_ids in named.items():
        if not isinstance(request_ids, list) or not all(isinstance(one, str) for one in request_ids):
            return None
        keys.update((topic, request_id) for request_id in request_ids)
    return frozenset(keys)

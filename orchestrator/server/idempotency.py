"""Idempotency-Key: a retried POST gets the first answer again instead of acting twice.

Answers are kept per (scope, key) for the last ``capacity`` keys. The same key
with a different body is refused (422): the key names one operation.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

import attrs

from orchestrator.server.errors import HTTPRefusal
from orchestrator.server.ids import checked_id

DEFAULT_CAPACITY = 10_000


@attrs.frozen
class Answer:
    status: int
    body: Any


class IdempotencyCache:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._answers: OrderedDict[tuple[str, str], tuple[str, Answer]] = OrderedDict()

    @staticmethod
    def check_key(key: str) -> None:
        """A 400 unless ``key`` is an acceptable id (``orchestrator.server.ids``)."""
        checked_id(key, "Idempotency-Key")

    @staticmethod
    def fingerprint(body: Any) -> str:
        return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def recall(self, scope: str, key: str, fingerprint: str) -> Answer | None:
        found = self._answers.get((scope, key))
        if found is None:
            return None
        seen, answer = found
        if seen != fingerprint:
            raise HTTPRefusal(422, "IdempotencyKeyReused", "this Idempotency-Key was used with a different body")
        self._answers.move_to_end((scope, key))
        return answer

    def remember(self, scope: str, key: str, fingerprint: str, answer: Answer) -> None:
        self._answers[(scope, key)] = (fingerprint, answer)
        self._answers.move_to_end((scope, key))
        while len(self._answers) > self.capacity:
            self._answers.popitem(last=False)

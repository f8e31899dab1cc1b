"""Idempotency-Key: a retried POST gets the first answer again instead of acting twice.

Answers are kept per (scope, key) for the last ``capacity`` keys. The same key
with a different body is refused (422): the key names one operation. A key is
reserved before its request acts (``once``): requests that overlap with it wait
for its answer and replay it, so overlapping retries act once. A request that
ends without an answer (a refusal raised) frees the key for the next.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs

from orchestrator.server.errors import HTTPRefusal
from orchestrator.server.ids import checked_id

DEFAULT_CAPACITY = 10_000


@attrs.frozen
class Answer:
    status: int
    body: Any


@attrs.frozen
class _Reservation:
    """A key whose first request is acting: its body's fingerprint, and set once it has an answer (or none)."""

    fingerprint: str
    done: anyio.Event


def _reused() -> HTTPRefusal:
    return HTTPRefusal(422, "IdempotencyKeyReused", "this Idempotency-Key was used with a different body")


class IdempotencyCache:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._answers: OrderedDict[tuple[str, str], tuple[str, Answer]] = OrderedDict()
        self._pending: dict[tuple[str, str], _Reservation] = {}

    async def once(self, scope: str, key: str, fingerprint: str, act: Callable[[], Awaitable[Answer]]) -> Answer:
        """The answer of the request that first used ``key`` in ``scope``; ``act`` runs only when none has it
        or is making it. Overlapping requests with the key wait for that answer; another body is a 422."""
        while True:
            answer = self.recall(scope, key, fingerprint)
            if answer is not None:
                return answer
            reservation = self._pending.get((scope, key))
            if reservation is None:
                break
            if reservation.fingerprint != fingerprint:
                raise _reused()
            await reservation.done.wait()
        reservation = _Reservation(fingerprint, anyio.Event())
        self._pending[(scope, key)] = reservation
        try:
            answer = await act()
            self.remember(scope, key, fingerprint, answer)
            return answer
        finally:
            del self._pending[(scope, key)]
            reservation.done.set()

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
            raise _reused()
        self._answers.move_to_end((scope, key))
        return answer

    def remember(self, scope: str, key: str, fingerprint: str, answer: Answer) -> None:
        self._answers[(scope, key)] = (fingerprint, answer)
        self._answers.move_to_end((scope, key))
        while len(self._answers) > self.capacity:
            self._answers.popitem(last=False)

"""``RateLimit``: a provider's budget (requests per second, tokens per minute) shared by the models given it.

Give one ``RateLimit`` to every model that uses one API key in a process (``OpenAIChatModel(...,
rate_limit=limit)``): each attempt of a model call, retries included, first takes one request and
an estimate of its tokens from the budget, waiting until both are there; a call never fails for
want of budget. When the response reports its usage, the estimate is corrected to what it used.
The budget refills continuously: ``requests_per_second`` each second, ``tokens_per_minute`` each
minute, and holds at most one second of requests and one minute of tokens.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import trio

from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent

__all__ = ["RateLimit", "estimated_tokens", "rate_limited"]


class RateLimit:
    """Requests per second and tokens per minute for one provider key, shared by a process's model calls.

    ``clock`` (seconds, monotonic) and ``sleep`` may be replaced (tests pass their own); one limit may
    be used from several threads and trio loops at once.
    """

    def __init__(
        self,
        *,
        requests_per_second: float | None = None,
        tokens_per_minute: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = trio.sleep,
    ) -> None:
        for name, value in (("requests_per_second", requests_per_second), ("tokens_per_minute", tokens_per_minute)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"RateLimit.{name} must be a number above 0 or None, got {value!r}")
        self.requests_per_second = requests_per_second
        self.tokens_per_minute = tokens_per_minute
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._requests = float(max(1.0, requests_per_second or 1.0))
        self._tokens = float(tokens_per_minute or 0.0)
        self._updated = clock()

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._updated)
        self._updated = now
        per_second = self.requests_per_second
        if per_second is not None:
            self._requests = min(max(1.0, per_second), self._requests + elapsed * per_second)
        if self.tokens_per_minute is not None:
            self._tokens = min(self.tokens_per_minute, self._tokens + elapsed * self.tokens_per_minute / 60)

    def _take(self, tokens: int) -> float:
        """Take a request and ``tokens`` if both are there (0.0), else the seconds until they may be."""
        with self._lock:
            self._refill(self._clock())
            wait = 0.0
            if self.requests_per_second is not None and self._requests < 1.0:
                wait = (1.0 - self._requests) / self.requests_per_second
            needed = min(float(tokens), self.tokens_per_minute or 0.0)
            if self.tokens_per_minute is not None and self._tokens < needed:
                wait = max(wait, (needed - self._tokens) * 60 / self.tokens_per_minute)
            if wait > 0:
                return wait
            if self.requests_per_second is not None:
                self._requests -= 1.0
            if self.tokens_per_minute is not None:
                self._tokens -= needed
            return 0.0

    async def acquire(self, tokens: int = 0) -> None:
        """Wait until one request and ``tokens`` (at most a minute's worth) are in the budget, and take them."""
        while (wait := self._take(tokens)) > 0:
            await self._sleep(wait)

    def settle(self, estimated: int, used: int) -> None:
        """A call took ``estimated`` tokens and used ``used``: give back the difference, or take the rest
        (the budget may go below zero; later calls wait for it to refill)."""
        if self.tokens_per_minute is None:
            return
        with self._lock:
            self._tokens = min(self.tokens_per_minute, self._tokens + estimated - used)


def estimated_tokens(request: ModelRequest) -> int:
    """A rough count of the tokens ``request`` sends (four characters a token) plus what it may answer."""
    sent = sum(len(json.dumps(str(getattr(m, "content", "")))) for m in request.messages)
    return sent // 4 + 1 + (request.settings.max_tokens or 0)


async def rate_limited(
    limit: RateLimit, request: ModelRequest, attempt: Callable[[ModelRequest], AsyncIterator[ModelEvent]]
) -> AsyncIterator[ModelEvent]:
    """``attempt(request)`` once ``limit`` has budget for it; its reported usage corrects the estimate."""
    estimate = estimated_tokens(request)
    await limit.acquire(estimate)
    stream = attempt(request)
    try:
        async for event in stream:
            if isinstance(event, ResponseCompletedEvent) and event.usage is not None:
                limit.settle(estimate, event.usage.input_tokens + event.usage.output_tokens)
            yield event
    finally:
        closer = getattr(stream, "aclose", None)
        if closer is not None:
            await closer()

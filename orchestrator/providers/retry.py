"""Retrying a model stream, with backoff, only until its first event arrives."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import attrs
import trio

from orchestrator.checks import number, whole
from orchestrator.providers.errors import ProviderError, ProviderTimeoutError

__all__ = ["RetryPolicy", "Sleep", "stream_with_retry"]

log = logging.getLogger("orchestrator.providers")

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


@attrs.frozen
class RetryPolicy:
    """How often and how long to retry.

    ``max_retries`` counts retries after the first attempt. The n-th retry
    waits ``initial_delay * multiplier**n`` (capped at ``max_delay``) with up
    to ``jitter`` of it added at random, or the server's ``retry_after`` when the
    failed response named one (whatever its status). ``total_timeout`` bounds the time until the first
    event across all attempts and waits (None: unbounded). Each field is checked when the policy is
    made: a wrong type raises TypeError, a negative (or not finite) value ValueError, naming it.
    """

    max_retries: int = attrs.field(default=2, validator=whole(0))
    initial_delay: float = attrs.field(default=0.5, validator=number(0))
    multiplier: float = attrs.field(default=2.0, validator=number(above=0))
    max_delay: float = attrs.field(default=30.0, validator=number(0))
    jitter: float = attrs.field(default=0.25, validator=number(0))
    total_timeout: float | None = attrs.field(default=600.0, validator=number(above=0, optional=True))

    def delay(self, retry: int, error: ProviderError, rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (0-based) after ``error``."""
        if error.retry_after is not None:
            return error.retry_after
        base = min(self.max_delay, self.initial_delay * self.multiplier**retry)
        return base * (1.0 + self.jitter * rng())


async def _close(stream: AsyncIterator[T]) -> None:
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        with trio.CancelScope(shield=True):
            await closer()


async def stream_with_retry(
    attempt: Callable[[], AsyncIterator[T]],
    policy: RetryPolicy,
    *,
    sleep: Sleep | None = None,
) -> AsyncIterator[T]:
    """Yield the items of ``attempt()``, starting it again on a retryable error.

    A ProviderError whose ``retryable`` is true starts a new attempt, but only
    while no item has been yielded; once one has, every error propagates.
    """
    pause: Sleep = sleep or trio.sleep
    deadline = trio.current_time() + policy.total_timeout if policy.total_timeout is not None else float("inf")
    retries = 0
    while True:
        stream = attempt()
        failure: ProviderError | None = None
        with trio.move_on_at(deadline) as scope:
            try:
                first = await stream.__anext__()
            except StopAsyncIteration:
                await _close(stream)
                return
            except ProviderError as error:
                await _close(stream)
                if not error.retryable or retries >= policy.max_retries:
                    raise
                failure = error
            except BaseException:
                await _close(stream)
                raise
            if failure is not None:
                wait = policy.delay(retries, failure)
                if trio.current_time() + wait > deadline:
                    raise failure
                retries += 1
                log.info("retry %d in %.2fs after %s", retries, wait, failure)
                await pause(wait)
                continue
        if scope.cancelled_caught:
            await _close(stream)
            raise ProviderTimeoutError(f"no response within {policy.total_timeout}s (after {retries} retries)")
        break
    try:
        yield first
        async for item in stream:
            yield item
    finally:
        await _close(stream)

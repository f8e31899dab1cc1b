"""A cap on the model calls an agent makes at once: a call past it waits for a slot, it never fails."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import trio

from orchestrator.model import ModelEvent, ModelRequest

__all__ = ["capped_stream"]


async def capped_stream(
    limiter: trio.CapacityLimiter, stream_of: Callable[[ModelRequest], AsyncIterator[ModelEvent]], request: ModelRequest
) -> AsyncIterator[ModelEvent]:
    """``stream_of(request)`` read while holding a slot of ``limiter``, from before the call is made until its
    stream is closed (read to its end, failed or cancelled)."""
    async with limiter:
        stream = stream_of(request)
        try:
            async for event in stream:
                yield event
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                with trio.CancelScope(shield=True):
                    await closer()

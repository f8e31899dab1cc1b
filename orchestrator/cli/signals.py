"""Ctrl-C: cancel the running turn; at the prompt, a second press exits. A service stops at the first."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs
import trio

if TYPE_CHECKING:
    from orchestrator.cli.conversation import Conversation

CANCELLING = "(Ctrl-C: cancelling the turn)"
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports it (also orchestrator.__main__'s)

async def watch_interrupts(
    conversation: Conversation,
    at_prompt: Callable[[], None] | None = None,
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Each Ctrl-C cancels the running turn, or (no turn running) calls ``at_prompt``."""
    with trio.open_signal_receiver(signal.SIGINT) as presses:
        task_status.started()
        async for _ in presses:
            if conversation.running:
                await conversation.cancel(CANCELLING)
            elif at_prompt is not None:
                at_prompt()


@attrs.define
class Stopped:
    """Which signal ended ``run_until_signalled``'s body (None: the body returned by itself)."""

    signal: int | None = None


async def run_until_signalled(
    body: Callable[[], Awaitable[None]], stopped: Stopped, signals: Iterable[int] = (signal.SIGINT,)
) -> None:
    """Run ``body`` until it returns or one of ``signals`` arrives; a signal cancels it and is noted in ``stopped``.

    The body unwinds through trio's cancellation (its ``finally`` blocks and nurseries close as usual)
    instead of meeting a KeyboardInterrupt wherever it happens to be. An error of the body is raised
    as it was, not inside an exception group.
    """
    try:
        with trio.open_signal_receiver(*signals) as arriving:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for number in arriving:
                        stopped.signal = number
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(watch)
                await body()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` is a KeyboardInterrupt, bare or (only KeyboardInterrupts) inside exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return all(interrupted(inner) for inner in error.exceptions)
    return isinstance(error, KeyboardInterrupt)

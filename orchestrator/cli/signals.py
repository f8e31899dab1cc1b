"""Ctrl-C: cancel the running turn; at the prompt, a second press exits. A service stops at the first."""

from __future__ import annotations

import signal
import sys
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


def run_service(
    name: str,
    body: Callable[[], Awaitable[None]],
    usage_errors: tuple[type[Exception], ...] = (),
    *,
    stopped: Stopped | None = None,
    signals: Iterable[int] = (signal.SIGINT,),
) -> int:
    """Run a long-lived command (``serve``, ``worker``) in trio until it ends or a signal stops it; its exit status.

    Every way it can end is one line on stderr, never a traceback: an error of ``usage_errors``
    (bad arguments, an ``--app`` that does not load) or a location that cannot be used, exit 2;
    a store that cannot be opened, exit 1; SIGINT, ``NAME: interrupted; stopped`` and exit 130
    (another signal: ``NAME: stopped by SIGNAME`` and 128 + its number). ``signals`` cancel the
    body; a body that handles its signals itself (``signals=()``) notes the one that stopped it
    in ``stopped``.
    """
    from orchestrator.store.errors import StoreError, UnusableLocation

    refused: tuple[type[Exception], ...] = (*usage_errors, UnusableLocation)
    stopped = Stopped() if stopped is None else stopped
    watched = tuple(signals)
    try:
        if watched:
            trio.run(run_until_signalled, body, stopped, watched)
        else:
            trio.run(body)
    except refused as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 2
    except StoreError as error:  # the store cannot be opened (an outage later is ridden out)
        print(f"{name}: {error}", file=sys.stderr)
        return 1
    except BaseException as error:  # Ctrl-C before the signal receiver was open
        if not interrupted(error):
            raise
        stopped.signal = signal.SIGINT
    if stopped.signal is None:
        return 0
    if stopped.signal == signal.SIGINT:
        print(f"{name}: interrupted; stopped", file=sys.stderr)
        return INTERRUPTED_EXIT
    print(f"{name}: stopped by {signal.Signals(stopped.signal).name}", file=sys.stderr)
    return 128 + stopped.signal


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` is a KeyboardInterrupt, bare or (only KeyboardInterrupts) inside exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return all(interrupted(inner) for inner in error.exceptions)
    return isinstance(error, KeyboardInterrupt)

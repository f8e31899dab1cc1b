"""Ctrl-C: cancel the running turn; at the prompt, a second press exits. A service stops at the first.

A service that can drain (``Shutdown``) drains at SIGTERM: it stops taking work, lets what runs finish
within its grace period, hands back what it holds and exits 0. SIGINT, or a second signal during a
drain, stops it at once, still handing back what it holds.
"""

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
    drained: bool = False
    """A SIGTERM drained the service (its exit status is then 0)."""


@attrs.define
class Shutdown:
    """What a service's body registers once it can drain: ``drain`` (graceful; the body returns once done)
    and ``hurry`` (hand back everything now). Until both are set, a signal cancels the body as before."""

    drain: Callable[[], Awaitable[None]] | None = None
    hurry: Callable[[], None] | None = None

    @property
    def ready(self) -> bool:
        return self.drain is not None and self.hurry is not None


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


async def run_until_drained(body: Callable[[], Awaitable[None]], stopped: Stopped, shutdown: Shutdown) -> None:
    """Run ``body`` until it returns: SIGTERM starts ``shutdown.drain``, SIGINT or a second signal calls
    ``shutdown.hurry``; a signal before the body registered them cancels it (noted in ``stopped``)."""
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as arriving:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for number in arriving:
                        first = stopped.signal is None
                        if first:
                            stopped.signal = number
                        if not shutdown.ready:
                            nursery.cancel_scope.cancel()
                            return
                        if first and number == signal.SIGTERM and shutdown.drain is not None:
                            stopped.drained = True
                            nursery.start_soon(shutdown.drain)
                        elif shutdown.hurry is not None:
                            shutdown.hurry()

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
    shutdown: Shutdown | None = None,
) -> int:
    """Run a long-lived command (``serve``, ``worker``) in trio until it ends or a signal stops it; its exit status.

    Every way it can end is one line on stderr, never a traceback: an error of ``usage_errors``
    (bad arguments, an ``--app`` that does not load) or a location that cannot be used, exit 2;
    a store that cannot be opened, exit 1; SIGINT, ``NAME: interrupted; stopped`` and exit 130
    (another signal: ``NAME: stopped by SIGNAME`` and 128 + its number). ``signals`` cancel the
    body; a body that handles its signals itself (``signals=()``) notes the one that stopped it
    in ``stopped``. With a ``shutdown``, SIGTERM drains the body (``run_until_drained``): once it
    returns, ``NAME: drained after SIGTERM; stopped`` and exit 0, even when a second signal hurried it.
    """
    from orchestrator.store.errors import StoreError, UnusableLocation

    refused: tuple[type[Exception], ...] = (*usage_errors, UnusableLocation)
    stopped = Stopped() if stopped is None else stopped
    watched = tuple(signals)
    try:
        if shutdown is not None:
            trio.run(run_until_drained, body, stopped, shutdown)
        elif watched:
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
    if stopped.drained:
        print(f"{name}: drained after SIGTERM; stopped", file=sys.stderr)
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

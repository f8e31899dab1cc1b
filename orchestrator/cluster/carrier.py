"""``RunCarrier``: a ``Worker`` carrying a run store's runs in a thread of its own, beside any server in the process.

The carrier's thread runs a trio loop of its own: it loads the application's agent there
(``MODULE:ATTR``, as ``worker --app`` does), opens the store and runs a ``Worker``, so an asyncio
process (a uvicorn worker, a FastAPI application) carries runs under leases as a ``worker`` process
does. ``stop`` drains it as SIGTERM drains ``worker``: no more claims, the steps running finish within
``grace_seconds``, every run still held goes back at its last commit with its lease ended, and the
thread ends. An interpreter that exits without stopping its carrier stops it on the way out (``atexit``).
A server that runs no lifespan never says it stops: ``drain_at_signals`` has the process's SIGTERM drain
the carrier first and then reach the server's own handler, so the server shuts down as it would, its runs
handed back; a process killed otherwise leaves its runs to be taken over once their leases expire.

In an application's lifespan, ``carrying_runs`` is the same as an async context manager::

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with carrying_runs("postgresql://app@db/agents", "myapp.agents:agent"):
            yield
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType

import anyio.to_thread
import attrs
import trio

from orchestrator.cluster.worker import CAPACITY, GRACE_SECONDS, LEASE_SECONDS, Worker
from orchestrator.errors import AgentError

log = logging.getLogger("orchestrator.cluster")

START_SECONDS = 60.0
"""Longest ``start`` waits for the carrier's agent and store before it gives up (CarrierFailed)."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals ``drain_at_signals`` watches: SIGTERM drains; either, during that drain, cuts it short."""

SignalHandler = Callable[[int, FrameType | None], object]


class CarrierFailed(AgentError):
    """The carrier could not start (its agent or its store), or stopped carrying on an error; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"runs are not carried: {reason}")
        self.reason = reason


@attrs.frozen
class CarrierSettings:
    """How a carrier's worker carries runs (the ``worker`` command's options of the same names)."""

    capacity: int = CAPACITY
    lease_seconds: float = LEASE_SECONDS
    grace_seconds: float = GRACE_SECONDS
    name: str | None = None


DEFAULT_SETTINGS = CarrierSettings()


class RunCarrier:
    """Carries the runs of the run store ``url`` with the agent ``app`` names (``MODULE:ATTR``), in a thread of
    its own running a trio loop; ``start`` and ``stop`` are plain blocking calls, safe from any thread."""

    def __init__(self, url: str, app: str, settings: CarrierSettings = DEFAULT_SETTINGS) -> None:
        self.url = url
        self.app = app
        self.settings = settings
        self.worker: Worker | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stopping: trio.Event | None = None
        self._grace = settings.grace_seconds
        self._signal_drain: threading.Thread | None = None
        self._resending = False
        self._passed_on = False

    @property
    def carrying(self) -> bool:
        """Whether the carrier's worker claims and carries runs now (started, not stopped, not failed)."""
        thread = self._thread
        return self._ready.is_set() and self._failure is None and thread is not None and thread.is_alive()

    def start(self, timeout: float = START_SECONDS) -> None:
        """Start carrying, once; returns when the worker claims runs. CarrierFailed (at every call) when the agent
        cannot be loaded, the store cannot be opened, or neither was done within ``timeout`` seconds; a worker
        that fails later is logged and ends (``carrying`` is then False)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=trio.run, args=(self._main,), name="run carrier", daemon=True)
                self._thread.start()
                atexit.register(self.stop)
        if not self._ready.wait(timeout):
            raise CarrierFailed(f"its agent and store were not ready within {timeout:g} s")
        if self._failure is not None:
            raise CarrierFailed(_why(self._failure)) from self._failure

    def stop(self, grace_seconds: float | None = None) -> None:
        """Drain, then end the thread: returns once every run it held is handed back (at most the grace, default
        the settings', plus the hand-back). Nothing happens when it never started or already stopped."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        atexit.unregister(self.stop)
        self._ready.wait(START_SECONDS)  # a worker not yet claiming holds no run: only its start is waited for
        token, stopping = self._token, self._stopping
        if grace_seconds is not None:
            self._grace = grace_seconds
        if token is None or stopping is None:
            return  # it failed to start (its thread ends by itself), or its start still hangs: it holds no run
        with contextlib.suppress(trio.RunFinishedError):  # it ended already
            trio.from_thread.run_sync(stopping.set, trio_token=token)
        thread.join()

    def hurry(self) -> None:
        """Cut a drain's grace short: every run still held goes back at once, at its last commit (nothing happens
        when the carrier does not run)."""
        token, worker = self._token, self.worker
        if token is None or worker is None:
            return
        with contextlib.suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(worker.stop_now, trio_token=token)

    def drain_at_signals(self) -> bool:
        """Have this process's SIGTERM drain the carrier before the handler in place, the server's own, gets the
        signal: the server serves on meanwhile, then shuts down as it would. A second signal (SIGTERM or SIGINT)
        during the drain hands every run back at once and reaches the server at once; a SIGINT before any goes
        straight on (the interpreter's exit drains the carrier then). For a server that runs no lifespan; call it
        from the main thread. False when nothing was put in place (another thread, or no Python handler to pass
        the signals on to)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        installed = False
        for number in STOP_SIGNALS:
            previous = signal.getsignal(number)
            if callable(previous):
                signal.signal(number, functools.partial(self._on_signal, previous))
                installed = True
        return installed

    def _on_signal(self, previous: SignalHandler, number: int, frame: FrameType | None) -> None:
        """The first SIGTERM drains in a thread of its own, which sends it again once done; that one, and any other
        signal, goes on to ``previous`` (the first SIGTERM once), a signal during the drain cutting it short."""
        draining = self._signal_drain
        if draining is None and number == signal.SIGTERM and not self._passed_on:
            draining = self._signal_drain = threading.Thread(
                target=self._drain_then_resend, args=(number,), name="run carrier drain"
            )
            draining.start()
            return
        if self._resending:
            self._resending = False
            if self._passed_on:
                return
        elif draining is not None and draining.is_alive():
            log.warning("signal %d during the drain: every run held is handed back at once", number)
            self.hurry()
        self._passed_on = True
        previous(number, frame)

    def _drain_then_resend(self, number: int) -> None:
        log.warning("signal %d: the run carrier drains before the server stops", number)
        try:
            self.stop()
        finally:
            if not self._passed_on:  # else the server has its signal already, and may have put its handlers back
                self._resending = True
                signal.pthread_kill(threading.main_thread().ident or 0, number)

    async def _main(self) -> None:
        from orchestrator.cli.apploader import load_agent
        from orchestrator.store.runs_sql import open_run_store

        store = None
        try:
            client = await load_agent(self.app)
            store = await trio.to_thread.run_sync(open_run_store, self.url)
            settings = self.settings
            worker = self.worker = Worker(
                client, store, name=settings.name, capacity=settings.capacity, lease_seconds=settings.lease_seconds
            )
            self._token = trio.lowlevel.current_trio_token()
            stopping = self._stopping = trio.Event()
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                log.info("worker %s carrying runs of %s", worker.name, store.where)
                self._ready.set()
                await stopping.wait()
                await worker.drain(self._grace)  # worker.run returns once every run is handed back
            log.info("worker %s drained: every run it held is handed back", worker.name)
        except BaseException as failed:
            if self._ready.is_set():
                log.error("worker stopped carrying runs of %s: %s", self.url, _why(failed))
            else:
                self._failure = failed  # what start says
            if not isinstance(failed, Exception):
                raise
        finally:
            self._ready.set()
            if store is not None:
                store.close()


@asynccontextmanager
async def carrying_runs(url: str, app: str, settings: CarrierSettings = DEFAULT_SETTINGS) -> AsyncIterator[RunCarrier]:
    """A ``RunCarrier`` started on entry and drained on exit, for an application's lifespan (asyncio or trio);
    its start and stop run in a thread of the caller's loop, which goes on meanwhile."""
    carrier = RunCarrier(url, app, settings)
    await anyio.to_thread.run_sync(carrier.start)
    try:
        yield carrier
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(carrier.stop)


def _why(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__

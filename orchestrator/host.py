"""AgentHost: an agent for asyncio (and plain synchronous) code, its trio loop in a thread of its own.

The host runs ``trio.run`` in a dedicated daemon thread and builds (or takes)
the ``AgentClient`` there. Every call crosses into that thread as a trio task
and its outcome comes back to the caller: as an awaitable on the caller's
asyncio loop (``await host.start(...)``), or, through ``host.sync``, as a plain
blocking call. No call blocks a thread of the caller's loop while it waits.

Events cross the boundary as the consumer reads: ``host.events(request_id,
after=seq)`` has a reader in the host's thread hand the run's batches over at
most ``PUMP_WINDOW`` batches ahead of the consumer, so a slow consumer holds
back nothing but its own reading (the run never waits for it; its memory is
bounded by the run's retained log), and a consumer that stops and comes back
with the last ``seq`` it saw misses nothing. Calls made while the host's
thread has not yet taken the previous ones in cross together, with one wake-up
of its loop.

Cancelling an awaiting asyncio task cancels what it started in the trio thread
(``await host.run(...)`` then cancels the request). A caller of ``host.start``
cancelled before it holds its HostedRun leaves no run behind: a run started for
it anyway is cancelled before anything the caller does next reaches the thread.
``close()`` drains, then ends the loop: no call is taken any more, requests that
work (not those only waiting for an answer) get ``grace_seconds`` to finish, and
those still running then are cancelled and settle their open calls first.

A request started from asyncio code carries the caller's loop and contextvars: its
``async def`` tools and extension hooks written by the application (defined outside
``orchestrator``, or declared ``loop="asyncio"``) run there as asyncio tasks, so they
may await anything of asyncio; the library's own run on trio (``orchestrator.tools.loops``,
``orchestrator.runtime.app_loop``).

The host's lifecycle is the ``agent_host`` machine (``machines/host.py``):
``starting -> serving -> closing -> closed``, or ``starting -> failed``; calls
are taken only in ``serving``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

import attrs
import trio

from machines.build import BoundMachine
from machines.host import AGENT_HOST
from orchestrator.agent import AgentClient
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Delivery
from orchestrator.errors import AgentError
from orchestrator.events import AgentEvent
from orchestrator.messages import AssistantMessage, ContentPart, Message, UserMessage
from orchestrator.runtime.app_loop import APP_LOOP, AppLoop
from orchestrator.runtime.handle import READ_BATCH, RETAINED_EVENTS, EventFollower, RunHandle
from orchestrator.runtime.pending import PendingCall

T = TypeVar("T")

ClientFactory = Callable[[], "AgentClient | Awaitable[AgentClient]"]
UserInput = str | UserMessage | Sequence[ContentPart]

GRACE_SECONDS = 30.0
"""How long ``close()`` lets requests that work finish before it cancels them."""
CLOSE_SECONDS = 30.0
"""How long ``close()`` waits for the host's thread past the grace period (requests settle under their own bound)."""
PUMP_WINDOW = 4
"""Batches of events a reader in the host's thread hands over before its consumer has taken the first of them."""


class HostClosed(AgentError):
    """The host's loop is not running (closed, or never started)."""


@attrs.define
class _Outcome(Generic[T]):
    """What a call into the host's thread produced: a value or an error."""

    value: Any = None
    error: BaseException | None = None

    def unwrap(self) -> T:
        if self.error is not None:
            raise self.error
        result: T = self.value
        return result


class _Call:
    """One call running (or about to run) in the host's thread; ``cancel`` is safe from any thread.

    ``app_loop``: the caller's asyncio loop and contextvars, for the requests the call makes.
    """

    def __init__(self, post: Callable[..., None], app_loop: AppLoop | None) -> None:
        self._post = post
        self.app_loop = app_loop
        self.scope: trio.CancelScope | None = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        with contextlib.suppress(HostClosed):
            self._post(self._cancel_scope)

    def _cancel_scope(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


class AgentHost:
    """An agent served from its own trio thread; awaitable methods for asyncio, ``host.sync`` for blocking calls.

    ``client_or_factory`` is an ``AgentClient``, or a callable returning one (or an
    awaitable of one, such as ``lambda: create_agent(model, ...)``), called in the
    host's thread. The constructor returns once the client exists (raising the
    factory's error, if any). ``grace_seconds`` is how long ``close()`` lets requests that work finish.
    """

    def __init__(
        self,
        client_or_factory: AgentClient | ClientFactory,
        *,
        name: str = "orchestrator-host",
        grace_seconds: float = GRACE_SECONDS,
    ) -> None:
        if grace_seconds < 0:
            raise ValueError("grace_seconds cannot be negative")
        self._source = client_or_factory
        self.grace_seconds = grace_seconds
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._lock = threading.Lock()
        self._inbox: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = collections.deque()
        self._inbox_lock = threading.Lock()
        self._inbox_posted = False
        self._machine = BoundMachine(AGENT_HOST, {})
        self._client: AgentClient | None = None
        self._app_loop: asyncio.AbstractEventLoop | None = _running_loop()
        self._thread = threading.Thread(target=trio.run, args=(self._main,), name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            raise self._failure
        self.sync = BlockingHost(self)

    @property
    def state(self) -> str:
        """``starting``, ``serving``, ``closing``, ``closed`` or ``failed``."""
        return self._machine.state()

    @property
    def _serving(self) -> bool:
        return self._machine.state() == "serving"

    def _fire(self, trigger: str) -> bool:
        """Take ``trigger`` if the host's state allows it (from any thread); whether it did."""
        with self._lock:
            if self._machine.is_final or not self._machine.may(trigger):
                return False
            self._machine.fire(trigger)
            if self._machine.is_final:
                self._machine.unbind()
            return True

    @property
    def client(self) -> AgentClient:
        """The client, to be used only from code running in the host's thread (see ``call``)."""
        assert self._client is not None
        return self._client

    # the host's thread --------------------------------------------------------

    async def _main(self) -> None:
        try:
            source = self._source
            produced: Any = source() if callable(source) and not isinstance(source, AgentClient) else source
            client = await produced if inspect.isawaitable(produced) else produced
            if not isinstance(client, AgentClient):
                raise TypeError(f"the host needs an AgentClient, got {type(client).__name__}")
            self._client = client
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
        except BaseException as error:
            self._failure = error
            self._fire("fail")
            self._ready.set()
            return
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._fire("ready")
                self._ready.set()
                await self._stop.wait()
                with trio.move_on_after(self.grace_seconds):
                    while client.agent.working():
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        finally:
            self._fire("close")
            self._fire("finish")

    def _spawn(
        self, call: _Call, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], report: Callable[[_Outcome[T]], None]
    ) -> None:
        if not self._serving or self._nursery is None:
            report(_Outcome(error=HostClosed(f"the host is {self.state}")))
            return
        self._nursery.start_soon(self._perform, call, fn, args, report)

    async def _perform(
        self, call: _Call, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], report: Callable[[_Outcome[T]], None]
    ) -> None:
        result: _Outcome[T] = _Outcome()
        if call.cancelled:  # the caller left before the call began: it never runs
            report(_Outcome(error=_CallCancelled()))
            return
        if call.app_loop is not None:
            APP_LOOP.set(call.app_loop)  # this call's task only: the requests it makes run app code there
        with trio.CancelScope() as scope:
            call.scope = scope
            try:
                result.value = await fn(*args)
            except trio.Cancelled:
                result.error = _CallCancelled() if self._serving else HostClosed("the host closed during the call")
                raise
            except BaseException as error:
                result.error = error
            finally:
                report(result)

    def _submit(
        self,
        fn: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        report: Callable[[_Outcome[T]], None],
        app_loop: AppLoop | None,
    ) -> _Call:
        if self._token is None or not self._serving:
            raise HostClosed(f"the host is {self.state}")
        call = _Call(self._post, app_loop)
        self._post(self._spawn, call, fn, args, report)
        return call

    def _submit_sync(self, fn: Callable[[T], None], value: T) -> None:
        """Run ``fn(value)`` in the host's thread, after everything submitted before it."""
        self._post(fn, value)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` in the host's thread soon, after everything posted before it (from any thread).

        Posts the host's thread has not taken in yet wait in one inbox, taken in at one wake-up of its loop,
        so a busy caller's calls cross together. HostClosed once the loop has ended."""
        token = self._token
        if token is None:
            raise HostClosed(f"the host is {self.state}")
        with self._inbox_lock:
            self._inbox.append((fn, args))
            if self._inbox_posted:
                return
            self._inbox_posted = True
        try:
            token.run_sync_soon(self._take_inbox)
        except trio.RunFinishedError:
            self._refuse_inbox()
            raise HostClosed("the host is closed") from None

    def _take_inbox(self) -> None:
        """In the host's thread: run what was posted, in order."""
        with self._inbox_lock:
            posted = list(self._inbox)
            self._inbox.clear()
            self._inbox_posted = False
        for fn, args in posted:
            fn(*args)

    def _refuse_inbox(self) -> None:
        """The loop has ended with posts in the inbox: their calls get HostClosed (``_spawn`` and ``_run_now`` say
        so), the rest (cancellations, abandoned runs, a reader's credit) have nothing left to act on."""
        with self._inbox_lock:
            posted = list(self._inbox)
            self._inbox.clear()
            self._inbox_posted = False
        for fn, args in posted:
            if fn == self._spawn or fn == self._run_now:
                fn(*args)

    # calling across ---------------------------------------------------------------

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``fn(*args)`` in the host's thread, from asyncio; cancelling the caller cancels it there."""
        return await self._call(fn, args, None)

    async def call_now(self, fn: Callable[..., T], *args: Any, abandon: Callable[[T], None] | None = None) -> T:
        """``fn(*args)``, a plain function, run in the host's thread as soon as it wakes (no task is made for it):
        for what reads or opens without waiting, such as a run's state. Its value or error comes back; a value
        that comes after the caller was cancelled is given to ``abandon`` (on the caller's loop)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._post(self._run_now, fn, args, loop, future, abandon)
        return await future

    def _run_now(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[T],
        abandon: Callable[[T], None] | None,
    ) -> None:
        """In the host's thread (or in the poster's, once the loop has ended): ``call_now``'s call, reported."""
        result: _Outcome[T] = _Outcome()
        if not self._serving or threading.current_thread() is not self._thread:
            result.error = HostClosed(f"the host is {self.state}")
        else:
            try:
                result.value = fn(*args)
            except Exception as error:
                result.error = error
        try:
            loop.call_soon_threadsafe(_settle_now, future, result, abandon)
        except RuntimeError:  # the caller's loop is gone: nobody will receive the value
            if abandon is not None and result.error is None:
                abandon(result.value)

    async def _call(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], abandon: Callable[[T], None] | None
    ) -> T:
        """``call``; when the caller is cancelled, a value it will never receive is given to ``abandon``.

        ``abandon`` runs in the host's thread, before anything the caller submits after its
        cancellation: a cancelled caller waits for the call's outcome (the call is cancelled
        too, so that is at most its next checkpoint) and hands a value that came anyway over.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._app_loop is None or self._app_loop.is_closed():
            self._app_loop = loop

        def report(result: _Outcome[T]) -> None:
            try:
                loop.call_soon_threadsafe(_settle, future, result)
            except RuntimeError:  # the caller's loop is gone: nobody will receive the value
                if abandon is not None and result.error is None:
                    abandon(result.value)

        call = self._submit(fn, args, report, AppLoop(loop, contextvars.copy_context(), self._post))
        if abandon is None:
            try:
                return await future
            except asyncio.CancelledError:
                call.cancel()
                raise
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            call.cancel()
            while not future.done():
                with contextlib.suppress(asyncio.CancelledError):  # the first cancellation is re-raised below
                    await asyncio.wait((future,))
            if future.exception() is None:
                with contextlib.suppress(HostClosed):  # a closed host cancelled its runs already
                    self._submit_sync(abandon, future.result())
            raise

    def call_blocking(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` in the host's thread and wait for it (not from the host's own thread)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a blocking host call from the host's own thread would wait for itself")
        done = threading.Event()
        box: list[_Outcome[T]] = []

        def report(result: _Outcome[T]) -> None:
            box.append(result)
            done.set()

        self._submit(fn, args, report, self._blocking_app_loop())
        done.wait()
        return box[0].unwrap()

    def _blocking_app_loop(self) -> AppLoop | None:
        """For a blocking call: the host's app loop with the caller's contextvars, unless that loop cannot run.

        A caller on a thread that runs an asyncio loop blocks that loop while it waits; its requests then
        run everything on trio (app code waiting for a blocked loop would never finish).
        """
        loop = self._app_loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return AppLoop(loop, contextvars.copy_context(), self._post)
        return None

    @property
    def app_loop(self) -> asyncio.AbstractEventLoop | None:
        """The application's asyncio loop: the one the host was made in, else the first one that called it
        (replaced by the next caller's once it is closed).

        Requests started from asyncio run their app-side coroutine tools and hooks on the caller's loop;
        those started through ``host.sync`` (from a thread without a loop) on this one, while it runs.
        """
        return self._app_loop

    # the agent, for asyncio ---------------------------------------------------------

    async def start(
        self,
        user_input: UserInput,
        *,
        config: AgentRunConfig | None = None,
        retain_events: int = RETAINED_EVENTS,
        deps: Any = None,
    ) -> HostedRun:
        """Start a request that runs on its own (SessionBusy raised here); its HostedRun. Its tools and hooks
        read ``deps`` as ``context.deps`` (else what the agent's ``deps_factory`` makes of its metadata).

        Cancelling the caller before it has the HostedRun cancels the request, if it started.
        """
        handle = await self._call(self._start, (user_input, config, retain_events, deps), _abandon)
        return HostedRun(self, handle.request_id, handle.session_id)

    def events(self, request_id: str, *, after: int = 0) -> AsyncIterator[AgentEvent]:
        """The run's events after ``after``, replayed then live, fetched as the consumer reads.

        Lazy: an unknown run or expired events raise at the first event; ``follow`` raises them up front.
        """
        return self._events(request_id, after)

    async def _events(self, request_id: str, after: int) -> AsyncIterator[AgentEvent]:
        async for event in await self.follow(request_id, after=after):
            yield event

    async def follow(self, request_id: str, *, after: int = 0) -> AsyncIterator[AgentEvent]:
        """The run's events after ``after`` (as ``events``), its reader opened now.

        Raises UnknownRun or EventsExpired here, before any event is read: a route can answer
        404 or 410 before it starts its response. Leaving the iterator affects only this reader.
        """
        follower = await self.call(self._follow, request_id, after)
        return self._read(follower)

    async def _read(self, follower: EventFollower) -> AsyncIterator[AgentEvent]:
        async for batch in self.batches(follower, list):
            for event in batch:
                yield event

    async def batches(
        self, follower: EventFollower, transform: Callable[[list[AgentEvent]], list[T]]
    ) -> AsyncIterator[list[T]]:
        """``follower``'s batches (as ``transform`` gives them, in the host's thread) for a consumer on this
        asyncio loop, ending after the run's last; a reader in the host's thread hands them over at most
        PUMP_WINDOW ahead. Leaving (or cancelling) the consumer stops that reader and nothing else.

        ``follower`` must come from the host's thread (``host.call``); HostClosed when the host closes."""
        pump = _Pump(self, follower, transform, asyncio.get_running_loop())
        self._post(self._launch, pump)
        try:
            while not (pump.finished and not pump.ready):
                outcome = await pump.next()
                batch = outcome.unwrap()
                if not batch:
                    return
                yield batch
        finally:
            pump.stop()

    def open_batches(
        self,
        follower: EventFollower,
        transform: Callable[[list[AgentEvent]], list[T]],
        loop: asyncio.AbstractEventLoop,
    ) -> HostBatches[T]:
        """In the host's thread (from a ``call_now`` function): ``batches`` of ``follower`` for a consumer on
        ``loop``, its reader started now rather than at the first batch. Its ``aclose`` (or reaching its end)
        stops that reader, even before anything was read."""
        pump = _Pump(self, follower, transform, loop)
        self._launch(pump)
        return HostBatches(pump)

    def _launch(self, pump: _Pump[Any]) -> None:
        """In the host's thread: start ``pump``'s reader, unless the host no longer serves."""
        if not self._serving or self._nursery is None:
            pump.hand(_Outcome(error=HostClosed(f"the host is {self.state}")))
            return
        self._nursery.start_soon(pump.run)

    async def history(self, session_id: str) -> list[Message]:
        """The session's messages, from the agent's history or its store extension (empty when none knows it)."""
        return await self.call(self._history, session_id)

    async def run(
        self, user_input: UserInput, *, config: AgentRunConfig | None = None, deps: Any = None
    ) -> AssistantMessage:
        """Run one request to its end (its tools and hooks read ``deps`` as ``context.deps``); cancelling the
        awaiting task cancels the request."""
        return await self.call(self._run, user_input, config, deps)

    async def result(self, request_id: str) -> AssistantMessage:
        """The final answer of a started run (its error, or RunCancelled, when it has none)."""
        return await self.call(self._result, request_id)

    async def deliver(self, event: ExternalEvent, *, config: AgentRunConfig) -> Delivery:
        """Offer an external event (an approval, an answer, steering): who took it, and why others refused."""
        return await self.call(self._deliver, event, config)

    async def pending(self, session_id: str | None = None) -> list[PendingCall]:
        """Every call waiting for an external answer."""
        return await self.call(self._pending, session_id)

    async def cancel(self, request_id: str) -> None:
        """Cancel a started run (UnknownRun when there is none)."""
        await self.call(self._cancel, request_id)

    # what runs in the host's thread ---------------------------------------------------

    async def _start(
        self, user_input: UserInput, config: AgentRunConfig | None, retain: int, deps: Any = None
    ) -> RunHandle:
        return await self.client.start(user_input, config=config, retain_events=retain, deps=deps)

    async def _follow(self, request_id: str, after: int) -> EventFollower:
        return self.client.attach(request_id).events(after)

    async def _run(self, user_input: UserInput, config: AgentRunConfig | None, deps: Any = None) -> AssistantMessage:
        return await self.client.run(user_input, config=config, deps=deps)

    async def _result(self, request_id: str) -> AssistantMessage:
        return await self.client.attach(request_id).result()

    async def _deliver(self, event: ExternalEvent, config: AgentRunConfig) -> Delivery:
        return self.client.deliver(event, config=config)

    async def _pending(self, session_id: str | None) -> list[PendingCall]:
        return self.client.pending(session_id)

    async def _cancel(self, request_id: str) -> None:
        self.client.attach(request_id).cancel()

    async def delete_session(self, session_id: str, *, cancel: bool = False) -> bool:
        """Remove the session everywhere the agent keeps it; see ``Agent.delete_session``."""
        return await self.call(self._delete_session, session_id, cancel)

    async def _delete_session(self, session_id: str, cancel: bool) -> bool:
        return await self.client.delete_session(session_id, cancel=cancel)

    async def _history(self, session_id: str) -> list[Message]:
        return await self.client.history(session_id)

    # closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Drain and end the host's loop: no call is taken; requests that work get ``grace_seconds`` to finish,
        then what still runs is cancelled. Waits for the host's thread."""
        if self._fire("close"):
            token, stop = self._token, self._stop
            if token is not None and stop is not None:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(stop.set)
        if threading.current_thread() is not self._thread:
            self._thread.join(self.grace_seconds + CLOSE_SECONDS)

    async def aclose(self) -> None:
        """``close`` without blocking the caller's asyncio loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> AgentHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AgentHost:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _CallCancelled(AgentError):
    """The caller stopped waiting, and the call was cancelled in the host's thread."""


class _Pump(Generic[T]):
    """One reader's batches crossing from the host's thread to its consumer's asyncio loop without a round trip
    per batch: ``run`` (host's thread) reads and hands them over, ``next`` (the loop) takes them; the reader
    waits once it is PUMP_WINDOW batches ahead, and is woken as the consumer takes them."""

    def __init__(
        self,
        host: AgentHost,
        follower: EventFollower,
        transform: Callable[[list[AgentEvent]], list[T]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.host = host
        self.follower = follower
        self.transform = transform
        self.loop = loop
        self.ready: collections.deque[_Outcome[list[T]]] = collections.deque()
        self.arrived = asyncio.Event()
        self.handed = 0  # written in the host's thread only
        self.taken = 0  # written on the loop only
        self.waiting: trio.Event | None = None  # set by the host's thread while it waits for the consumer
        self.scope: trio.CancelScope | None = None
        self.stopped = False
        self.finished = False

    # the host's thread

    async def run(self) -> None:
        with trio.CancelScope() as scope:
            self.scope = scope
            if self.stopped:
                return
            try:
                while True:
                    while self.handed - self.taken >= PUMP_WINDOW:
                        self.waiting = waiting = trio.Event()
                        if self.handed - self.taken < PUMP_WINDOW:
                            break
                        await waiting.wait()
                    batch = await self.follower.batch(READ_BATCH)
                    last = not batch or self.follower.ended
                    self.hand(_Outcome(value=self.transform(batch)), last)
                    if last:
                        return
            except trio.Cancelled:
                if not self.stopped:
                    closed = HostClosed("the host closed during the call")
                    self.hand(_Outcome(error=closed if not self.host._serving else _CallCancelled()))
                raise
            except Exception as error:
                self.hand(_Outcome(error=error))

    def hand(self, outcome: _Outcome[list[T]], last: bool = False) -> None:
        """Hand ``outcome`` over to the consumer's loop; ``last``: the reader has ended, no batch follows it."""
        self.handed += 1
        try:
            self.loop.call_soon_threadsafe(self._arrive, outcome, last)
        except RuntimeError:  # the consumer's loop is gone: nobody reads any more
            self.stopped = True
            if self.scope is not None:
                self.scope.cancel()

    def _cancel(self) -> None:
        self.stopped = True
        if self.scope is not None:
            self.scope.cancel()

    # the consumer's loop

    def _arrive(self, outcome: _Outcome[list[T]], last: bool) -> None:
        self.ready.append(outcome)
        if last:
            self.finished = True  # the reader has returned: stopping it has nothing left to do
        self.arrived.set()

    async def next(self) -> _Outcome[list[T]]:
        while not self.ready:
            self.arrived.clear()
            await self.arrived.wait()
        outcome = self.ready.popleft()
        self.taken += 1
        waiting = self.waiting
        if waiting is not None and not waiting.is_set():
            with contextlib.suppress(HostClosed):
                self.host._post(waiting.set)
        if outcome.error is not None or not outcome.value:
            self.finished = True
        return outcome

    def stop(self) -> None:
        """The consumer left: stop the reader in the host's thread (if it still reads)."""
        if not self.finished:
            self.finished = True
            with contextlib.suppress(HostClosed):
                self.host._post(self._cancel)


def _abandon(handle: RunHandle) -> None:
    """Cancel a run whose caller left before it got the run (in the host's thread)."""
    handle.abandon()


def _settle(future: asyncio.Future[T], result: _Outcome[T]) -> None:
    if future.done():
        return
    if result.error is not None:
        future.set_exception(result.error)
    else:
        future.set_result(result.value)


def _settle_now(future: asyncio.Future[T], result: _Outcome[T], abandon: Callable[[T], None] | None) -> None:
    """On the caller's loop: ``call_now``'s outcome; a value its cancelled caller will never take goes to
    ``abandon``."""
    if not future.done():
        _settle(future, result)
    elif abandon is not None and result.error is None:
        abandon(result.value)


class HostBatches(Generic[T]):
    """The batches of one reader in the host's thread, for a consumer on an asyncio loop (``open_batches``)."""

    def __init__(self, pump: _Pump[T]) -> None:
        self._pump = pump
        self._closed = False

    def __aiter__(self) -> HostBatches[T]:
        return self

    async def __anext__(self) -> list[T]:
        if self._closed or (self._pump.finished and not self._pump.ready):
            raise StopAsyncIteration
        batch = (await self._pump.next()).unwrap()
        if not batch:
            raise StopAsyncIteration
        return batch

    def stop(self) -> None:
        """Stop reading: the reader in the host's thread stops (nothing else does). From any thread."""
        self._closed = True
        self._pump.stop()

    async def aclose(self) -> None:
        self.stop()


@attrs.frozen
class HostedRun:
    """A run started through the host, seen from the caller's side."""

    host: AgentHost = attrs.field(repr=False)
    request_id: str
    session_id: str

    def events(self, after: int = 0) -> AsyncIterator[AgentEvent]:
        return self.host.events(self.request_id, after=after)

    async def follow(self, after: int = 0) -> AsyncIterator[AgentEvent]:
        """``host.follow`` for this run: UnknownRun or EventsExpired raised here, not at the first event."""
        return await self.host.follow(self.request_id, after=after)

    async def result(self) -> AssistantMessage:
        return await self.host.result(self.request_id)

    async def cancel(self) -> None:
        await self.host.cancel(self.request_id)


class BlockingHost:
    """The host's methods as plain blocking calls, for synchronous code (never from the host's thread)."""

    def __init__(self, host: AgentHost) -> None:
        self._host = host

    def start(
        self,
        user_input: UserInput,
        *,
        config: AgentRunConfig | None = None,
        retain_events: int = RETAINED_EVENTS,
        deps: Any = None,
    ) -> HostedRun:
        handle = self._host.call_blocking(self._host._start, user_input, config, retain_events, deps)
        return HostedRun(self._host, handle.request_id, handle.session_id)

    def events(self, request_id: str, *, after: int = 0) -> Iterator[AgentEvent]:
        host = self._host
        follower = host.call_blocking(host._follow, request_id, after)
        while True:
            batch = host.call_blocking(follower.batch, READ_BATCH)
            if not batch:
                return
            yield from batch

    def run(self, user_input: UserInput, *, config: AgentRunConfig | None = None, deps: Any = None) -> AssistantMessage:
        return self._host.call_blocking(self._host._run, user_input, config, deps)

    def result(self, request_id: str) -> AssistantMessage:
        return self._host.call_blocking(self._host._result, request_id)

    def deliver(self, event: ExternalEvent, *, config: AgentRunConfig) -> Delivery:
        return self._host.call_blocking(self._host._deliver, event, config)

    def pending(self, session_id: str | None = None) -> list[PendingCall]:
        return self._host.call_blocking(self._host._pending, session_id)

    def cancel(self, request_id: str) -> None:
        self._host.call_blocking(self._host._cancel, request_id)

    def history(self, session_id: str) -> list[Message]:
        return self._host.call_blocking(self._host._history, session_id)

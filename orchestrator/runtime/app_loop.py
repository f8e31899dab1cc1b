"""AppLoop: an application's asyncio loop, on which a request's app-side coroutine tools and hooks run.

A request started through an ``AgentHost`` from asyncio code carries the caller's loop and
a copy of its contextvars (``APP_LOOP``, read once when the request is made). Its coroutine
tools and extension hooks that ``orchestrator.tools.loops`` assigns to the app loop are then
run there, each as an asyncio task in a copy of that context, while the request's trio task
waits for it. Cancellation crosses both ways: a cancelled request (or a tool's timeout)
cancels the asyncio task and waits for it to finish (its ``finally`` runs on the app loop
first), and a task cancelled on the app loop's side raises ``AppTaskCancelled`` in the
request. A request without an app loop (``APP_LOOP`` unset) pays nothing for any of it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import types
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from orchestrator.errors import AgentError
from orchestrator.runtime.hooks import AgentExtension
from orchestrator.tools.loops import wants_app_loop

if TYPE_CHECKING:  # asyncio itself is loaded by the application that has such a loop, not by this module
    import asyncio

T = TypeVar("T")

#: The app loop of the requests made in this context (set by ``AgentHost`` for the calls it runs).
APP_LOOP: contextvars.ContextVar[AppLoop | None] = contextvars.ContextVar("orchestrator_app_loop", default=None)

#: Hooks that take ``call_next`` (a trio continuation): they stay on the request's trio loop.
TRIO_ONLY_HOOKS = frozenset({"on_tool_call", "on_model_request"})

#: How often a cancelled crossing looks whether the app loop still runs while it waits for its task.
_LOOP_CHECK_SECONDS = 0.5


class AppLoopClosed(AgentError):
    """The application's asyncio loop is closed (or no longer running): a coroutine meant for it cannot run there."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} cannot run: the application's asyncio event loop is no longer running")
        self.what = what


class AppTaskCancelled(AgentError):
    """The asyncio task of a tool or hook was cancelled on the application's side (not by the request)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} was cancelled on the application's asyncio event loop")
        self.what = what


class _Crossing:
    """One coroutine run as an asyncio task for a trio task that waits for it."""

    __slots__ = ("cancel_requested", "cancelled_by_app", "done", "error", "task", "value", "wake")

    def __init__(self, wake: Callable[..., None]) -> None:
        self.wake = wake
        self.done = trio.Event()
        self.task: asyncio.Task[Any] | None = None
        self.cancel_requested = False
        self.cancelled_by_app = False
        self.value: Any = None
        self.error: BaseException | None = None

    def start(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context, loop: asyncio.AbstractEventLoop
    ) -> None:
        """On the app loop: make the task (unless the request gave up first)."""
        if self.cancel_requested:
            coro.close()
            self._report()
            return
        self.task = loop.create_task(coro, context=context)
        self.task.add_done_callback(self._finished)

    def cancel(self) -> None:
        """On the app loop: cancel the task (or keep it from being made)."""
        self.cancel_requested = True
        if self.task is not None:
            self.task.cancel()

    def _finished(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self.cancelled_by_app = not self.cancel_requested
        elif (error := task.exception()) is not None:
            self.error = error
        else:
            self.value = task.result()
        self._report()

    def _report(self) -> None:
        with contextlib.suppress(trio.RunFinishedError, AgentError):  # the request's loop has ended: nobody waits
            self.wake(self.done.set)


class AppLoop:
    """An application's asyncio loop and the contextvars of the code that started a request from it.

    ``wake(fn, *args)`` runs ``fn`` in the request's trio loop from the app loop (default: its token's
    ``run_sync_soon``); a host gives its own, which lets many crossings share one wake-up.
    """

    __slots__ = ("context", "loop", "wake")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context,
        wake: Callable[..., None] | None = None,
    ) -> None:
        self.loop = loop
        self.context = context
        self.wake = wake

    @property
    def running(self) -> bool:
        return self.loop.is_running() and not self.loop.is_closed()

    async def run(self, awaitable: Awaitable[T], what: str = "a coroutine") -> T:
        """Await ``awaitable`` as an asyncio task on the app loop, from the request's trio task.

        Cancelled, the task is cancelled and waited for (while the loop runs). AppLoopClosed
        when the loop cannot take it; AppTaskCancelled when the app side cancelled the task.
        """
        coro = awaitable if isinstance(awaitable, types.CoroutineType) else _awaiting(awaitable)
        crossing = _Crossing(self.wake or trio.lowlevel.current_trio_token().run_sync_soon)
        try:
            if not self.running:
                raise RuntimeError("the loop is not running")
            self.loop.call_soon_threadsafe(crossing.start, coro, self.context.copy(), self.loop)
        except RuntimeError:
            coro.close()
            raise AppLoopClosed(what) from None
        try:
            await crossing.done.wait()
        except trio.Cancelled:
            await self._cancel(crossing)
            raise
        if crossing.cancelled_by_app:
            raise AppTaskCancelled(what)
        if crossing.error is not None:
            raise crossing.error
        result: T = crossing.value
        return result

    async def _cancel(self, crossing: _Crossing) -> None:
        """Cancel the task and wait for it to end (its ``finally`` included), while the app loop runs."""
        with trio.CancelScope(shield=True):
            try:
                self.loop.call_soon_threadsafe(crossing.cancel)
            except RuntimeError:  # the loop is closed: nothing of the task can run any more
                return
            while not crossing.done.is_set() and self.running:
                with trio.move_on_after(_LOOP_CHECK_SECONDS):
                    await crossing.done.wait()


async def _awaiting(awaitable: Awaitable[T]) -> T:
    return await awaitable


class _OnAppLoop:
    """An extension as a request with an app loop sees it: the hooks meant for that loop run there.

    Every other attribute is the extension's own.
    """

    def __init__(self, extension: AgentExtension, app_loop: AppLoop, names: Sequence[str]) -> None:
        self.__dict__["_extension"] = extension
        for name in names:
            self.__dict__[name] = _crossing_hook(getattr(extension, name), app_loop, f"{extension.name}.{name}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_extension"], name)


def _crossing_hook(hook: Callable[..., Awaitable[Any]], app_loop: AppLoop, what: str) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(hook)
    async def crossing(*args: Any) -> Any:
        return await app_loop.run(hook(*args), what)

    return crossing


def hook_on_app_loop(extension: AgentExtension, name: str) -> bool:
    """Whether ``extension``'s ``name`` hook runs on a request's app loop (see ``orchestrator.tools.loops``).

    Its choice: the hook function's ``runs_on`` mark, else the extension's ``hook_loop``, else the rule of ``"auto"``.
    """
    if name in TRIO_ONLY_HOOKS:
        return False
    hook = extension.__dict__.get(name)
    if hook is None:
        hook = getattr(type(extension), name, None)
    if hook is None:
        return False
    declared = getattr(extension, "hook_loop", "auto")
    return wants_app_loop(hook, declared if isinstance(declared, str) else "auto")


def hooks_on_app_loop(
    hooks: Mapping[str, Sequence[AgentExtension]], app_loop: AppLoop
) -> Mapping[str, Sequence[AgentExtension]]:
    """``hooks`` (an agent's, by name) with each extension that has hooks for the app loop seen as ``_OnAppLoop``."""
    names: dict[int, list[str]] = {}
    extensions: dict[int, AgentExtension] = {}
    for name, listed in hooks.items():
        for extension in listed:
            if hook_on_app_loop(extension, name):
                names.setdefault(id(extension), []).append(name)
                extensions[id(extension)] = extension
    if not names:
        return hooks
    seen: dict[int, Any] = {key: _OnAppLoop(extensions[key], app_loop, listed) for key, listed in names.items()}
    return {name: [seen.get(id(extension), extension) for extension in listed] for name, listed in hooks.items()}


__all__ = [
    "APP_LOOP",
    "TRIO_ONLY_HOOKS",
    "AppLoop",
    "AppLoopClosed",
    "AppTaskCancelled",
    "hook_on_app_loop",
    "hooks_on_app_loop",
]

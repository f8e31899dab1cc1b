"""ToolRunner: runs the tool calls of one assistant message for its RequestRun.

Calls of one message run concurrently in a trio nursery, except a tool declared
``serial``, which runs alone. Their outcome events stream as they complete;
their results are recorded in the calls' order (a result waits for those of the
calls before it), so history and the next model request are the same every run. Each call goes
``before_tool`` (which may record an approval whose edited arguments the call
then runs with) -> the ``admit_tool`` guard of the request machine -> ``on_tool_call`` middleware ->
the handler -> ``after_tool`` -> its one ToolMessage, then steering is polled.
The calls of a response cut off at the output token limit (``max_tokens``)
never run: each gets a failed result saying so (``before_tool`` and the
middleware are not asked), and so do calls a usage limit refuses (the request's
``Budget``, asked before each call). A handler that runs past its timeout (the
tool's, else the agent's ``tool_timeout``) is cancelled and the call fails saying so.
Whatever a tool or hook returns becomes text, or text and image parts, that
encode as UTF-8 (``tool_content``); a value that cannot fails the call. When hooks
of several concurrent calls fail, the request gets one plain exception: the
first error, the others described in its notes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import trio

from machines.frozen import constructor
from orchestrator import events as ev
from orchestrator.errors import ToolArgumentsError, ToolRejected
from orchestrator.messages import ToolCall, ToolStatus
from orchestrator.runtime.app_loop import AppTaskCancelled
from orchestrator.tool_content import UnsupportedToolResult, tool_content
from orchestrator.tools import ToolResult

if TYPE_CHECKING:
    from orchestrator.runtime.ports import RunPort

#: How many characters of a call's invalid argument text its failed result quotes.
INVALID_ARGUMENTS_QUOTE = 2000

# A result's status (a string ToolResult checked) as the message's ToolStatus.
_STATUSES = {status.value: status for status in ToolStatus}

SKIPPED = "skipped: new user input arrived before this call ran"


def no_longer_available(tool_name: str) -> str:
    """The failed result of a resumed call whose tool the resuming agent does not have."""
    return (
        f"not run: the tool {tool_name!r} is no longer available (the agent was changed while this call waited);"
        " carry on without it"
    )


CUT_OFF = (
    "not run: the response hit the output token limit (max_tokens) while its tool calls were being written, "
    "so this call may be incomplete; send it again, shorter if need be"
)


class ToolRunner:
    """The tool-execution part of one request: its batches, each call's hooks, and results.

    Made for one assistant message's calls and dropped after them, so a request
    never refers to its runner (a finished request is freed without the cycle
    collector).
    """

    __slots__ = ("admitted", "run_of")

    def __init__(self, run: RunPort) -> None:
        self.run_of = run
        # The usage limits' verdicts on the calls of a concurrent batch, taken in call order before it starts.
        self.admitted: dict[str, str | None] | None = None

    def run(self, calls: tuple[ToolCall, ...]) -> Coroutine[Any, Any, None]:
        """Run ``calls`` batch by batch until steering arrives; every call not run gets a skipped result.

        The usual single call, with no steering waiting, is its own batch, whether serial
        or not: its coroutine is returned as it is (it settles its call itself), so
        thousands of requests waiting inside a call (for an approval) keep one frame
        fewer each. Otherwise no closures are made either.
        """
        if len(calls) == 1 and self.run_of.steering is None:
            self.run_of.skipped_ids = ()
            return self._run_call(calls[0])
        return self._run_batches(calls)

    async def _run_batches(self, calls: tuple[ToolCall, ...]) -> None:
        run = self.run_of
        for batch in batches(calls, self._serial):
            if run.steering is not None:
                break
            if len(batch) == 1:
                await self._run_call(batch[0])
                continue
            order = tuple(call.id for call in batch)
            budget = run.budget
            if budget is not None and not run.cut_off:
                self.admitted = {call.id: budget.before_call(call.name) for call in batch}
            try:
                async with trio.open_nursery() as nursery:
                    for call in batch:
                        nursery.start_soon(self._run_call, call, order)
            except BaseExceptionGroup as group:
                raise first_failure(group) from None
        skipped: list[ToolCall] = []
        for call in calls:
            if call.id in run.open_calls:
                skipped.append(call)
        run.skipped_ids = tuple(c.id for c in skipped)
        for call in skipped:
            await run.settle(call, ToolStatus.SKIPPED, SKIPPED)

    def _limit_on(self, call: ToolCall) -> str | None:
        """The usage limit that refuses ``call``, or None: its batch's verdict, else asked now."""
        if self.admitted is not None and call.id in self.admitted:
            return self.admitted.pop(call.id)
        assert self.run_of.budget is not None
        return self.run_of.budget.before_call(call.name)

    def _serial(self, call: ToolCall) -> bool:
        definition = self.run_of.context.tools.get(call.name)
        return definition is not None and definition.serial

    async def _run_call(self, requested: ToolCall, order: tuple[str, ...] | None = None) -> None:
        """Run one call to its one result; ``order``: the ids of the concurrent batch it is part of."""
        run = self.run_of
        # The call as the tool and its hooks see it: its own copy of the arguments.
        call = _copied_call(requested.id, requested.name, dict(requested.arguments), requested.invalid_arguments)
        await run._emit(ev.ToolStartedEvent, call)
        error: BaseException | None = None
        budget = run.budget
        if run.cut_off:
            result = ToolResult(CUT_OFF, "failed")
        elif run.restored is not None and call.name not in run.context.tools and call.id in run.restored.open_calls:
            # Resumed by an agent without its tool (a deploy removed it while the call waited): nobody is asked.
            result = ToolResult(no_longer_available(call.name), "failed")
        elif budget is not None and (limit := self._limit_on(call)) is not None:
            await run._announce(run.machine.fire("call_over_limit")[0])
            result = ToolResult(budget.refusal(limit, call.name), "failed")
        else:
            # before_tool runs in this frame (no _run_hook, no helper coroutine): a call waiting
            # there for an approval keeps no frame of its own besides this one.
            try:
                for extension in run.hooks["before_tool"]:
                    await extension.before_tool(run.context, call)
            except ToolRejected as rejected:
                result, error = ToolResult(f"rejected: {rejected}", "failed"), rejected
            else:
                approval = run.context.approval_of(call.id)
                if approval is not None and approval.get("edited"):
                    # Approved with edited arguments (checked against the tool's schema): the call runs with them.
                    call = _copied_call(call.id, call.name, dict(approval["arguments"]), None)
                result, error = await self._admit_and_run(call)
        result = settled(result)
        if run.hooks["after_tool"]:
            await run._run_hook("after_tool", call, result, error)
            result = settled(result)
        if order is None:
            await run.settle(call, _STATUSES[result.status], result.content)
        else:
            await run.settle_in_order(call, _STATUSES[result.status], result.content, order)
        await run._poll()

    async def _admit_and_run(self, call: ToolCall) -> tuple[ToolResult, BaseException | None]:
        """After ``before_tool``: the ``admit_tool`` guard, then the middleware chain; the result and any error."""
        run = self.run_of
        admitted = run.machine.try_fire("admit_tool", call=call)
        if admitted is None:
            return ToolResult(f"tool {call.name!r} is not available in this request", "failed"), None
        await run._announce(admitted[0])
        try:
            return await self._chain(0, call), None
        except Exception as failure:
            return ToolResult(f"{type(failure).__name__}: {failure}", "failed"), failure

    async def _chain(self, index: int, call: ToolCall) -> ToolResult:
        """Each layer's plain return value (a wrapper's as much as the handler's) becomes a ToolResult."""
        context = self.run_of.context
        wrappers = self.run_of.hooks["on_tool_call"]
        value: Any
        if index < len(wrappers):
            value = await wrappers[index].on_tool_call(context, call, lambda c: self._chain(index + 1, c))
        elif call.invalid_arguments is not None:
            quoted = quote(call.invalid_arguments, INVALID_ARGUMENTS_QUOTE)
            return ToolResult(f"invalid arguments for {call.name}: not a valid JSON object: {quoted}", "failed")
        else:
            definition = context.tools[call.name]
            timeout = definition.timeout if definition.timeout is not None else self.run_of.agent.tool_timeout
            injected = {"context": context, "call": call}
            app_loop = self.run_of.app_loop
            runner = None
            if app_loop is not None and definition.on_app_loop:
                runner = functools.partial(app_loop.run, what=f"tool {call.name!r}")
            try:
                if timeout is None:
                    value = await definition.invoke(call.arguments, injected, runner=runner)
                else:
                    with trio.move_on_after(timeout) as scope:
                        value = await definition.invoke(call.arguments, injected, abandon=True, runner=runner)
                    if scope.cancelled_caught:
                        return await self._timed_out(call, timeout, definition.idempotent)
            except ToolArgumentsError as invalid:
                return ToolResult(f"invalid arguments for {call.name}: {invalid}", "failed")
            except AppTaskCancelled as cancelled:
                return ToolResult(str(cancelled), "cancelled")
        return value if isinstance(value, ToolResult) else _succeeded(value, "succeeded")


    async def _timed_out(self, call: ToolCall, timeout: float, idempotent: bool) -> ToolResult:
        """The failed result of a call cut off at its timeout (after the ``call_timed_out`` edge)."""
        run = self.run_of
        await run._announce(run.machine.fire("call_timed_out")[0])
        said = f"timed out: {call.name} did not finish within {timeout:g} s"
        if not idempotent:
            said += "; it may or may not have taken effect"
        return ToolResult(said, "failed")


#: A copy of a checked call's fields (its arguments a dict) needs no second check.
_copied_call = constructor(ToolCall, positional=True, checked=False)
#: A tool's plain return value with a status known to be valid.
_succeeded = constructor(ToolResult, positional=True, checked=False)


def settled(result: ToolResult) -> ToolResult:
    """``result`` with its content made a message's (``tool_content``), or a failed result saying why it cannot be."""
    try:
        content = tool_content(result.content)
    except UnsupportedToolResult as unsupported:
        return ToolResult(f"unsupported tool result: {unsupported.reason}", "failed")
    if content is not result.content:
        result.content = content
    return result


def batches(calls: tuple[ToolCall, ...], serial: Callable[[ToolCall], bool]) -> list[list[ToolCall]]:
    """Consecutive concurrent calls share a batch; a serial call runs alone."""
    found: list[list[ToolCall]] = []
    for call in calls:
        if serial(call) or not found or serial(found[-1][0]):
            found.append([call])
        else:
            found.append([*found.pop(), call])
    return found


def quote(text: str, limit: int) -> str:
    """``text`` as a Python literal, cut to ``limit`` characters (saying so)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r} (cut: {len(text)} characters in all)"


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What concurrently running tool calls raise: the same shape as one call's failure.

    The first error (in the order trio reports them) is raised as it is; every
    other error is described in one of its notes (``__notes__``), so callers and
    ``on_error`` see one plain exception whether one call failed or several. A
    group holding only cancellations stays the group, for cancellation to
    propagate.
    """
    failures = [leaf for leaf in _leaves(group) if not isinstance(leaf, trio.Cancelled)]
    if not failures:
        return group
    first, *others = failures
    for other in others:
        first.add_note(f"a concurrent tool call also failed: {type(other).__name__}: {other}")
    return first

"""Budget: one request's spending counted against its UsageLimits.

A request has a Budget only when its agent or its run sets ``usage_limits``; a
request without one does no counting at all. The request asks ``before_request``
before each model request and ``before_call`` before each tool call; each
answers with the limit that refuses it, or None.
"""

from __future__ import annotations

import math

import trio

from orchestrator.limits import RunUsage, UsageLimitExceeded, UsageLimits
from orchestrator.model import Usage

#: The system note of the wrap-up call: the model is told why it has no tools left.
WRAP_UP_NOTE = (
    "The usage budget of this request is spent: no tool can run any more. "
    "Answer now with what you have, and say what is left undone."
)


#: A model call whose provider reported no usage counts as this (one shared value).
_NOTHING_REPORTED = Usage()


class Budget:
    """Counts one request's model calls, tokens and tool calls, and says when a limit is reached."""

    __slots__ = (
        "exhausted",
        "input_tokens",
        "limits",
        "model_calls",
        "output_tokens",
        "per_tool",
        "subagents",
        "tool_calls",
        "wrapped_up",
    )

    def __init__(self, limits: UsageLimits) -> None:
        self.limits = limits
        self.model_calls: list[Usage] = []
        self.per_tool: dict[str, int] = {}
        self.tool_calls = 0
        self.subagents = Usage()
        # Running totals of the tokens counted against the limits (the subagents' with count_subagents).
        self.input_tokens = 0
        self.output_tokens = 0
        # The first limit reached (then no tool runs any more), and whether the wrap-up call was made.
        self.exhausted: str | None = None
        self.wrapped_up = False

    # counting -----------------------------------------------------------------

    def record_model_call(self, usage: Usage | None) -> None:
        if usage is None:
            usage = _NOTHING_REPORTED
        self.model_calls.append(usage)
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens

    def record_subagent(self, usage: Usage) -> None:
        self.subagents = Usage(
            self.subagents.input_tokens + usage.input_tokens, self.subagents.output_tokens + usage.output_tokens
        )
        if self.limits.count_subagents:
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens

    def resume(self, spent: RunUsage) -> None:
        """Count what the request spent before it was resumed from a run store (``report`` of its last carrier)."""
        for usage in spent.model_calls:
            self.record_model_call(usage)
        for tool, calls in spent.per_tool.items():
            self.per_tool[tool] = self.per_tool.get(tool, 0) + calls
            self.tool_calls += calls
        self.record_subagent(spent.subagents)

    # checks -------------------------------------------------------------------

    def _token_limit_reached(self) -> str | None:
        limits = self.limits
        if limits.input_tokens is None and limits.output_tokens is None and limits.total_tokens is None:
            return None
        spent_in, spent_out = self.input_tokens, self.output_tokens
        if limits.input_tokens is not None and spent_in >= limits.input_tokens:
            return "input_tokens"
        if limits.output_tokens is not None and spent_out >= limits.output_tokens:
            return "output_tokens"
        if limits.total_tokens is not None and spent_in + spent_out >= limits.total_tokens:
            return "total_tokens"
        return None

    def before_request(self) -> str | None:
        """The limit that refuses the next model request, or None (the request may be made)."""
        if self.exhausted is None:
            if self.limits.requests is not None and len(self.model_calls) >= self.limits.requests:
                self.exhausted = "requests"
            else:
                self.exhausted = self._token_limit_reached()
        return self.exhausted

    def before_call(self, tool: str) -> str | None:
        """The limit that refuses a call of ``tool``, or None (the call is counted and may run).

        A reached per-tool cap refuses that tool's calls only; any other limit
        exhausts the budget, and every later call is refused too.
        """
        if self.exhausted is None:
            if self.limits.tool_calls is not None and self.tool_calls >= self.limits.tool_calls:
                self.exhausted = "tool_calls"
            else:
                self.exhausted = self._token_limit_reached()
        if self.exhausted is not None:
            return self.exhausted
        cap = self.limits.per_tool.get(tool)
        if cap is not None and self.per_tool.get(tool, 0) >= cap:
            return f"per_tool[{tool!r}]"
        self.tool_calls += 1
        self.per_tool[tool] = self.per_tool.get(tool, 0) + 1
        return None

    def allowed(self, limit: str, tool: str = "") -> int:
        """The number a limit named by ``before_request`` or ``before_call`` (of a call of ``tool``) allows."""
        if limit.startswith("per_tool["):
            return self.limits.per_tool[tool]
        value = getattr(self.limits, limit)
        assert isinstance(value, int)
        return value

    @property
    def may_wrap_up(self) -> bool:
        """Whether a reached limit leads to the wrap-up call (made once) rather than to failure."""
        return self.limits.on_exhausted == "wrap_up" and not self.wrapped_up

    def refusal(self, limit: str, tool: str) -> str:
        """The content of the failed result of a call of ``tool`` that ``limit`` refused."""
        return f"not run: the request reached its usage limit {limit}={self.allowed(limit, tool)}"

    def exceeded(self) -> UsageLimitExceeded:
        assert self.exhausted is not None
        return UsageLimitExceeded(self.exhausted, self.allowed(self.exhausted), self.report())

    def report(self) -> RunUsage:
        return RunUsage(tuple(self.model_calls), dict(self.per_tool), self.subagents)


class Deadline:
    """A request's deadline: a cancel scope whose clock stops while the request waits for people.

    ``pause`` (the first call of the request paused for an answer) stops the clock;
    ``resume`` (the last answered) starts it again with the time that was left. ``left`` is where a
    request resumed in another process starts (what its earlier segments did not use).
    """

    __slots__ = ("_left", "scope", "seconds")

    def __init__(self, seconds: float, left: float | None = None) -> None:
        self.seconds = seconds
        self.scope: trio.CancelScope | None = None
        self._left = seconds if left is None else max(0.0, min(seconds, left))

    def start(self) -> trio.CancelScope:
        self.scope = trio.CancelScope(deadline=trio.current_time() + self._left)
        return self.scope

    def left(self) -> float:
        """The running time left: what is left now while the clock runs, else what was left when it stopped."""
        if self.scope is not None and self.scope.deadline != math.inf:
            return max(0.0, self.scope.deadline - trio.current_time())
        return self._left

    def pause(self) -> None:
        if self.scope is not None and self.scope.deadline != math.inf:
            self._left = max(0.0, self.scope.deadline - trio.current_time())
            self.scope.deadline = math.inf

    def resume(self) -> None:
        if self.scope is not None and self.scope.deadline == math.inf:
            self.scope.deadline = trio.current_time() + self._left

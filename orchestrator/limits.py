"""Bounds on what one request may spend: usage limits, and the typed errors a bound ends a request with.

``UsageLimits`` caps model requests, tokens and tool calls (in all and per tool);
the runtime checks it before each model request and before each tool call. What
one request spent is a ``RunUsage``: per model call, per tool and in total.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs

from machines.values import FieldValues
from orchestrator.checks import Check, flag, whole
from orchestrator.errors import AgentError
from orchestrator.model import Usage

__all__ = ["RequestDeadlineExceeded", "RunUsage", "UsageLimitExceeded", "UsageLimits"]

OnExhausted = Literal["fail", "wrap_up"]

#: The limits that count the request's whole spending, in the order they are checked.
LIMIT_NAMES = ("requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls")


def _check_on_exhausted(where: str, value: Any) -> None:
    if value not in ("fail", "wrap_up"):
        raise ValueError(f"{where} must be 'fail' or 'wrap_up', got {value!r}")


def _check_per_tool(where: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be a mapping of tool names to int, got {type(value).__name__}")
    for name, cap in value.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"{where} keys must be tool names (non-empty str), got {name!r}")
        whole(0).check(f"{where}[{name!r}]", cap)


def _frozen_mapping(value: Any) -> Any:
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else value


@attrs.frozen(eq=False, repr=False)
class UsageLimits(FieldValues):
    """What one request may spend; None leaves a limit off. A limit of N allows N and refuses the N+1st.

    ``requests`` counts model calls, ``tool_calls`` tool calls run, and the token
    limits the tokens the provider reported so far (a model call may take the count
    past its limit: the limit is then reached, and no further call is made). Each
    is checked before every model request and before every tool call. A call past
    a ``per_tool`` cap gets a failed result and the request goes on. When a limit
    is reached, ``on_exhausted`` says what happens: ``"fail"`` ends the request with
    ``UsageLimitExceeded``; ``"wrap_up"`` makes one last model call, offering no
    tools, so the request ends with an answer. ``count_subagents`` adds the usage
    of the request's subagents to its own. ``UsageLimits()`` limits nothing and
    only counts (``client.usage``).
    """

    requests: int | None = attrs.field(default=None, validator=whole(0, optional=True), kw_only=True)
    input_tokens: int | None = attrs.field(default=None, validator=whole(0, optional=True), kw_only=True)
    output_tokens: int | None = attrs.field(default=None, validator=whole(0, optional=True), kw_only=True)
    total_tokens: int | None = attrs.field(default=None, validator=whole(0, optional=True), kw_only=True)
    tool_calls: int | None = attrs.field(default=None, validator=whole(0, optional=True), kw_only=True)
    per_tool: Mapping[str, int] = attrs.field(
        factory=dict, converter=_frozen_mapping, validator=Check(_check_per_tool), kw_only=True
    )
    on_exhausted: OnExhausted = attrs.field(default="fail", validator=Check(_check_on_exhausted), kw_only=True)
    count_subagents: bool = attrs.field(default=False, validator=flag(), kw_only=True)


@attrs.frozen(eq=False, repr=False)
class RunUsage(FieldValues):
    """What one request spent: each model call's usage in order, tool calls run per tool, and the totals.

    ``subagents`` is what its subagents spent, reported apart (and counted in the
    request's limits only with ``UsageLimits.count_subagents``).
    """

    model_calls: tuple[Usage, ...] = ()
    per_tool: Mapping[str, int] = attrs.field(factory=dict, converter=_frozen_mapping)
    subagents: Usage = attrs.field(factory=Usage)

    @property
    def requests(self) -> int:
        return len(self.model_calls)

    @property
    def input_tokens(self) -> int:
        return sum(usage.input_tokens for usage in self.model_calls)

    @property
    def output_tokens(self) -> int:
        return sum(usage.output_tokens for usage in self.model_calls)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def tool_calls(self) -> int:
        return sum(self.per_tool.values())


LIMIT_FIELDS = (*LIMIT_NAMES, "per_tool", "on_exhausted", "count_subagents")
"""The fields of ``UsageLimits`` in its JSON form (an HTTP run's ``limits``, a stored run's input row)."""


def usage_limits_json(limits: UsageLimits) -> dict[str, Any]:
    """``limits`` as a JSON object of the fields set (what ``usage_limits_from_json`` reads back)."""
    body: dict[str, Any] = {name: getattr(limits, name) for name in LIMIT_NAMES if getattr(limits, name) is not None}
    if limits.per_tool:
        body["per_tool"] = dict(limits.per_tool)
    if limits.on_exhausted != "fail":
        body["on_exhausted"] = limits.on_exhausted
    if limits.count_subagents:
        body["count_subagents"] = True
    return body


def usage_limits_from_json(data: object) -> UsageLimits:
    """The ``UsageLimits`` a JSON object names; TypeError or ValueError, saying which field is wrong, otherwise."""
    if not isinstance(data, Mapping):
        raise TypeError(f"usage limits must be an object, got {type(data).__name__}")
    unknown = sorted(str(name) for name in data if name not in LIMIT_FIELDS)
    if unknown:
        raise ValueError(f"unknown usage limits {unknown} (known: {', '.join(LIMIT_FIELDS)})")
    return UsageLimits(**{str(name): value for name, value in data.items()})


class UsageLimitExceeded(AgentError):
    """A request reached one of its usage limits: ``limit`` names it (``"requests"``, ``"tool_calls"``, ...)."""

    def __init__(self, limit: str, allowed: int, usage: RunUsage) -> None:
        super().__init__(f"the request reached its usage limit {limit}={allowed}")
        self.limit = limit
        self.allowed = allowed
        self.usage = usage


class RequestDeadlineExceeded(AgentError):
    """A request ran for longer than its deadline (time spent waiting for people not counted)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request ran past its deadline of {seconds:g} s")
        self.seconds = seconds

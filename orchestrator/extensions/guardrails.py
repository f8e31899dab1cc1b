"""Guardrails: checks of a request's input (before the first model call) and of its final answer.

A guardrail is a function of ``(context, value)`` returning a ``GuardrailResult``, sync or
async, made one with ``@input_guardrail`` (the value is the user's ``UserMessage``) or
``@output_guardrail`` (the final ``AssistantMessage``). ``GuardrailsExtension`` collects them;
the request machine runs them in ``checking_input`` and ``checking_output``, the guardrails of
one stage at once in a trio nursery. A tripwire ends the request with ``InputGuardrailTripped``
or ``OutputGuardrailTripped`` and a ``guardrail_tripped`` event; a guardrail that raises fails
the request with its own error.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Generic, Literal, TypeVar, overload

import attrs
import trio

from orchestrator.errors import GuardrailTripped, InputGuardrailTripped, OutputGuardrailTripped
from orchestrator.events.base import AgentEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import AssistantMessage, UserMessage
from orchestrator.runtime.context import AgentRunContext

__all__ = [
    "Guardrail",
    "GuardrailResult",
    "GuardrailTrippedEvent",
    "GuardrailsExtension",
    "input_guardrail",
    "output_guardrail",
]

_V = TypeVar("_V", UserMessage, AssistantMessage)
Stage = Literal["input", "output"]


@attrs.frozen
class GuardrailResult:
    """What one guardrail said: ``tripwire`` True refuses the value, for ``reason``; ``info`` is anything it found."""

    tripwire: bool = False
    reason: str = ""
    info: Any = None


GuardrailFunction = Callable[[AgentRunContext, _V], "GuardrailResult | Awaitable[GuardrailResult]"]


@attrs.frozen(kw_only=True, repr=False, eq=False, match_args=False)
class GuardrailTrippedEvent(AgentEvent):
    """A guardrail refused the request's input or its final answer (``stage``); the request fails next."""

    kind: ClassVar[str] = "guardrail_tripped"
    guardrail: str
    stage: str
    reason: str


@attrs.frozen
class Guardrail(Generic[_V]):
    """One named check of a stage (``input`` or ``output``); ``function`` may be sync or async."""

    name: str
    stage: Stage
    function: Callable[[AgentRunContext, _V], Any]

    async def check(self, context: AgentRunContext, value: _V) -> GuardrailResult:
        """Run the check; a result that is not a GuardrailResult is a TypeError naming the guardrail."""
        result = self.function(context, value)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, GuardrailResult):
            raise TypeError(f"guardrail {self.name!r} returned {type(result).__name__}, not a GuardrailResult")
        return result


@overload
def input_guardrail(function: Callable[[AgentRunContext, UserMessage], Any], /) -> Guardrail[UserMessage]: ...
@overload
def input_guardrail(
    *, name: str | None = None
) -> Callable[[Callable[[AgentRunContext, UserMessage], Any]], Guardrail[UserMessage]]: ...
def input_guardrail(function: Any = None, /, *, name: str | None = None) -> Any:
    """Make ``function(context, message) -> GuardrailResult`` an input guardrail, named ``name`` or after it."""
    return _decorate("input", function, name)


@overload
def output_guardrail(
    function: Callable[[AgentRunContext, AssistantMessage], Any], /
) -> Guardrail[AssistantMessage]: ...
@overload
def output_guardrail(
    *, name: str | None = None
) -> Callable[[Callable[[AgentRunContext, AssistantMessage], Any]], Guardrail[AssistantMessage]]: ...
def output_guardrail(function: Any = None, /, *, name: str | None = None) -> Any:
    """Make ``function(context, answer) -> GuardrailResult`` an output guardrail, named ``name`` or after it."""
    return _decorate("output", function, name)


def _decorate(stage: Stage, function: Any, name: str | None) -> Any:
    def make(f: Any) -> Guardrail[Any]:
        if not callable(f):
            raise TypeError(f"an {stage} guardrail must be a function of (context, value), not {type(f).__name__}")
        label: str = name or getattr(f, "__name__", None) or type(f).__name__
        return Guardrail(label, stage, f)

    return make if function is None else make(function)


class GuardrailsExtension(AgentExtension):
    """Runs its input guardrails on a request's input and its output guardrails on the final answer.

    The guardrails of a stage run at once (a trio nursery); the first tripwire or error
    cancels the others. Of several that tripped or raised, the first in the order given counts.
    """

    def __init__(self, guardrails: Sequence[Guardrail[Any]], *, name: str | None = None) -> None:
        for given in guardrails:
            if not isinstance(given, Guardrail):
                raise TypeError(
                    f"GuardrailsExtension takes guardrails made by @input_guardrail or @output_guardrail,"
                    f" not {type(given).__name__}"
                )
        names = [g.name for g in guardrails]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"guardrail names must be unique; repeated: {', '.join(duplicates)}")
        self.input_guardrails: tuple[Guardrail[UserMessage], ...] = tuple(g for g in guardrails if g.stage == "input")
        self.output_guardrails: tuple[Guardrail[AssistantMessage], ...] = tuple(
            g for g in guardrails if g.stage == "output"
        )
        if name is not None:
            self.name = name
        # A stage without guardrails leaves its hook unimplemented: the request skips that state.
        if not self.input_guardrails:
            self.check_input = None  # type: ignore[assignment]
        if not self.output_guardrails:
            self.check_output = None  # type: ignore[assignment]

    async def check_input(self, context: AgentRunContext, message: UserMessage) -> None:
        await _check(context, self.input_guardrails, message, InputGuardrailTripped)

    async def check_output(self, context: AgentRunContext, answer: AssistantMessage) -> None:
        await _check(context, self.output_guardrails, answer, OutputGuardrailTripped)


async def _check(
    context: AgentRunContext,
    guardrails: Sequence[Guardrail[_V]],
    value: _V,
    tripped: type[GuardrailTripped],
) -> None:
    """Run ``guardrails`` on ``value`` at once; raise ``tripped`` (after its event) or a guardrail's own error."""
    outcomes: dict[int, GuardrailResult | Exception] = {}

    async def one(index: int, guardrail: Guardrail[_V], scope: trio.CancelScope) -> None:
        try:
            outcomes[index] = result = await guardrail.check(context, value)
        except Exception as error:
            error.add_note(f"raised by {guardrail.stage} guardrail {guardrail.name!r}")
            outcomes[index] = error
            scope.cancel()
            return
        if result.tripwire:
            scope.cancel()

    async with trio.open_nursery() as nursery:
        for index, guardrail in enumerate(guardrails):
            nursery.start_soon(one, index, guardrail, nursery.cancel_scope)
    for index, guardrail in enumerate(guardrails):
        outcome = outcomes.get(index)
        if isinstance(outcome, Exception):
            raise outcome
        if outcome is not None and outcome.tripwire:
            event = GuardrailTrippedEvent(guardrail=guardrail.name, stage=tripped.stage, reason=outcome.reason)
            await context.emit(event)
            raise tripped(guardrail.name, outcome.reason, outcome.info)

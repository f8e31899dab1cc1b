"""Small helpers shared by the tests."""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from orchestrator import AgentExtension, AssistantMessage, ToolCall
from orchestrator.events import AgentEvent, TransitionEvent

T = TypeVar("T")


def unchecked(cls: type[T], **given: Any) -> T:
    """An instance of the attrs class ``cls`` made without its checks: what a hostile model could hand over."""
    value: T = object.__new__(cls)
    for field in attrs.fields(cls):  # type: ignore[misc]
        if field.name in given:
            chosen = given[field.name]
        elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            chosen = field.default.factory()
        else:
            chosen = field.default
        object.__setattr__(value, field.name, chosen)
    return value


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments)


def asks(*calls: ToolCall, text: str = "") -> AssistantMessage:
    return AssistantMessage(text, calls)


def phases(events: list[AgentEvent]) -> list[tuple[str, str, str]]:
    return [(e.source, e.trigger, e.dest) for e in events if isinstance(e, TransitionEvent) and e.region == "phase"]


class Recorder(AgentExtension):
    """Records every hook call as (extension name, hook name[, detail])."""

    def __init__(self, log: list[tuple[str, ...]], name: str | None = None, priority: int = 0) -> None:
        self.log = log
        self.priority = priority
        if name is not None:
            self.name = name

    def _note(self, hook: str, *detail: str) -> None:
        self.log.append((self.name, hook, *detail))

    async def on_tool(self, context):  # type: ignore[no-untyped-def]
        self._note("on_tool")

    async def on_state(self, context):  # type: ignore[no-untyped-def]
        self._note("on_state")

    async def on_message(self, context):  # type: ignore[no-untyped-def]
        self._note("on_message")

    async def before_run(self, context):  # type: ignore[no-untyped-def]
        self._note("before_run")

    async def before_turn(self, context):  # type: ignore[no-untyped-def]
        self._note("before_turn")

    async def before_model(self, context, request):  # type: ignore[no-untyped-def]
        self._note("before_model")

    async def on_model_request(self, context, request, call_next):  # type: ignore[no-untyped-def]
        self._note("on_model_request")
        async for event in call_next(request):
            yield event

    async def after_model(self, context, response):  # type: ignore[no-untyped-def]
        self._note("after_model")

    async def before_tool(self, context, call):  # type: ignore[no-untyped-def]
        self._note("before_tool", call.id)

    async def on_tool_call(self, context, call, call_next):  # type: ignore[no-untyped-def]
        self._note("on_tool_call", call.id)
        return await call_next(call)

    async def after_tool(self, context, call, result, error):  # type: ignore[no-untyped-def]
        self._note("after_tool", call.id)

    async def after_turn(self, context, result):  # type: ignore[no-untyped-def]
        self._note("after_turn")

    async def after_run(self, context, result):  # type: ignore[no-untyped-def]
        self._note("after_run")

    async def on_success(self, context, result):  # type: ignore[no-untyped-def]
        self._note("on_success")

    async def on_error(self, context, error):  # type: ignore[no-untyped-def]
        self._note("on_error", type(error).__name__)

    async def on_event(self, context, event):  # type: ignore[no-untyped-def]
        if event.name == "run_cancelled":
            self._note("on_event", event.name)

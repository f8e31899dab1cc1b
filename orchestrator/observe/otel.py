"""OpenTelemetry traces and metrics of requests, following the GenAI semantic conventions.

Needs the ``otel`` extra (``opentelemetry-api``; an SDK and an exporter to see anything). Nothing imports this
module unless you do, so an agent without ``OpenTelemetryExtension`` pays nothing for it.

Spans: ``invoke_agent`` (one request, or one segment of a parked run), ``chat`` (one model call, with usage and the
finish reason) and ``execute_tool`` (one tool call); a subagent's request is an ``invoke_agent`` under the call that
ran it when its agent has the extension too. Each transition of a machine is a span event of the request's span,
and so are waits for an approval or an answer. Message content is recorded only with ``capture_content=True``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from orchestrator.events import (
    AgentEvent,
    RunCancelledEvent,
    RunCompletedEvent,
    RunFailedEvent,
    RunStartedEvent,
    ToolCancelledEvent,
    ToolCompletedEvent,
    ToolFailedEvent,
    ToolSkippedEvent,
    TransitionEvent,
)
from orchestrator.messages import Message, ToolCall, ToolMessage, text_of
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent, StopReason
from orchestrator.observe.otel_metrics import INSTRUMENTATION, RunInstruments
from orchestrator.runtime.hooks import AgentExtension, CallNextModel, CallNextTool
from orchestrator.tools import ToolResult

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

CARRIER_KEYS = ("traceparent", "tracestate", "parent_traceparent", "parent_tracestate")
"""The keys of a trace carrier (``OpenTelemetryExtension.carrier``): W3C trace context of a run's segment, and of
the context the run's first segment was started under (absent when it was a root)."""

FINISH_REASONS: Mapping[str, str] = {
    "end_turn": "stop",
    "tool_use": "tool_call",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "refusal": "refusal",
    "other": "other",
}
"""Our stop reasons in the words of the GenAI conventions' ``finish_reason``."""

_PROVIDERS = {
    "OpenAIChatModel": "openai",
    "OpenAIResponsesModel": "openai",
    "AnthropicModel": "anthropic",
    "GeminiModel": "gcp.gemini",
}

_WAIT_EVENTS = {"tool_approval": "approval", "ask_user": "question"}
_TOOL_ENDS = (ToolCompletedEvent, ToolFailedEvent, ToolSkippedEvent, ToolCancelledEvent)
_RUN_ENDS = (RunCompletedEvent, RunFailedEvent, RunCancelledEvent)

ResumeCarrier = Callable[["AgentRunContext"], Mapping[str, str] | None]
"""Gives the stored trace carrier of the run a request resumes (None for a request that resumes nothing)."""


def _provider(model: object) -> str | None:
    return _PROVIDERS.get(type(model).__name__)


def _model_name(model: object) -> str | None:
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else None


def _content(messages: Sequence[Message]) -> str:
    """Messages as the JSON text of ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (role and text parts)."""
    shown: list[dict[str, Any]] = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        content = getattr(message, "content", "")
        text = content if isinstance(content, str) else text_of(content)
        if text:
            parts.append({"type": "text", "content": text})
        for call in getattr(message, "tool_calls", ()) or ():
            parts.append({"type": "tool_call", "id": call.id, "name": call.name, "arguments": dict(call.arguments)})
        if isinstance(message, ToolMessage):
            parts = [{"type": "tool_call_response", "id": message.tool_call_id, "response": text}]
        shown.append({"role": getattr(message, "role", type(message).__name__), "parts": parts})
    return json.dumps(shown, default=str)


@attrs.define
class _Request:
    """What the extension keeps of one running request (one segment of a run)."""

    span: trace.Span
    context: otel_context.Context  # the request's span as the parent of its chat and execute_tool spans
    parent: otel_context.Context | None  # what the run's first segment was started under
    started: float
    attributes: dict[str, str]
    waits: dict[str, tuple[str, float]] = attrs.Factory(dict)  # call id -> (approval | question, since)


class OpenTelemetryExtension(AgentExtension):
    """Records each request as OpenTelemetry spans and metrics, in the words of the GenAI semantic conventions.

    ``tracer_provider`` and ``meter_provider`` default to the global ones; ``traces=False`` or ``metrics=False``
    leaves one signal out. ``capture_content=True`` adds the messages, tool arguments and results to the spans
    (off by default: they may hold personal data). ``agent_name`` names the agent in ``gen_ai.agent.name``.
    ``resume_carrier`` gives, for a request that resumes a parked run, the carrier stored with the run
    (``carrier`` made it): the resumed segment's span is then started under the span the run's first segment
    started under, with a link to the segment the carrier came from; or, when the first segment was a root, under
    that segment.
    """

    event_names: frozenset[str] | None = frozenset(
        {"run_started", "transition", "run_completed", "run_failed", "run_cancelled", "run_parked", "run_resumed",
         "tool_approval", "ask_user", "tool_completed", "tool_failed", "tool_skipped", "tool_cancelled"}
    )  # fmt: skip
    priority = -1000  # outermost: a tool's span covers what the other extensions do around it

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        capture_content: bool = False,
        agent_name: str | None = None,
        traces: bool = True,
        metrics: bool = True,
        resume_carrier: ResumeCarrier | None = None,
    ) -> None:
        if not isinstance(capture_content, bool):
            raise TypeError(f"capture_content must be a bool, got {capture_content!r}")
        if agent_name is not None and (not isinstance(agent_name, str) or not agent_name):
            raise ValueError(f"agent_name must be a non-empty string or None, got {agent_name!r}")
        if resume_carrier is not None and not callable(resume_carrier):
            raise TypeError(f"resume_carrier must be callable or None, got {resume_carrier!r}")
        self.capture_content = capture_content
        self.agent_name = agent_name
        self.resume_carrier = resume_carrier
        self._provider = tracer_provider
        self._tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider) if traces else None
        self._requests: dict[str, _Request] = {}
        self._instruments = RunInstruments(meter_provider) if metrics else None

    # -- the request's span ------------------------------------------------------------------------------------------

    def _begin(self, context: AgentRunContext) -> _Request:
        known = self._requests.get(context.request_id)
        if known is not None:
            return known
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": context.session_id}
        model = context.agent.model
        provider, model_name = _provider(model), _model_name(model)
        if provider:
            attributes["gen_ai.provider.name"] = provider
        if model_name:
            attributes["gen_ai.request.model"] = model_name
        if self.agent_name:
            attributes["gen_ai.agent.name"] = self.agent_name
        parent: otel_context.Context | None = otel_context.get_current()
        links: list[Link] = []
        stored = self.resume_carrier(context) if self.resume_carrier is not None else None
        if stored:
            previous = _extract(stored, "")
            parent = _extract(stored, "parent_")
            if parent is None:  # the run's first segment was a root: later ones go under it, in its trace
                parent = previous
            elif previous is not None:
                segment = trace.get_current_span(previous).get_span_context()
                links.append(Link(segment, {"orchestrator.link": "previous segment"}))
        name = f"invoke_agent {self.agent_name}" if self.agent_name else "invoke_agent"
        if self._tracer is not None:
            span = self._tracer.start_span(
                name,
                context=parent if parent is not None else otel_context.Context(),
                kind=SpanKind.INTERNAL,
                attributes={**attributes, "orchestrator.request.id": context.request_id},
                links=links,
            )
        else:
            span = trace.INVALID_SPAN
        request = _Request(span, trace.set_span_in_context(span), parent, time.monotonic(), attributes)
        self._requests[context.request_id] = request
        if self._instruments is not None:
            self._instruments.started(attributes)
        return request

    def _end(self, context: AgentRunContext, outcome: str, error: BaseException | None = None) -> None:
        request = self._requests.pop(context.request_id, None)
        if request is None:
            return
        span = request.span
        span.set_attribute("orchestrator.run.outcome", outcome)
        if error is not None:
            span.record_exception(error)
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        elif outcome == "cancelled":
            span.set_status(Status(StatusCode.ERROR, "cancelled"))
        span.end()
        if self._instruments is not None:
            self._instruments.ended(request.attributes, outcome, time.monotonic() - request.started)

    def carrier(self, request_id: str) -> dict[str, str]:
        """The W3C trace context of a running request, for a run store to keep with a parked run (see ``CARRIER_KEYS``).

        The same for the whole segment, so it may be taken at any time while the request runs (when the run is
        claimed, or before it parks). Empty for a request this extension does not see running.
        """
        request = self._requests.get(request_id)
        if request is None:
            return {}
        kept: dict[str, str] = {}
        propagator = TraceContextTextMapPropagator()
        propagator.inject(kept, context=request.context)
        if request.parent is not None:
            above: dict[str, str] = {}
            propagator.inject(above, context=request.parent)
            kept.update({f"parent_{key}": value for key, value in above.items()})
        return kept

    def anchor_trace(self, session_id: str, request_id: str) -> dict[str, str]:
        """Start the trace of a durable run started with no span current (``observe.trace_context.TraceAnchor``).

        Records a root span ``orchestrator.run``, ends it and flushes the tracer provider, so the span has been
        handed to the exporters before its W3C trace context (returned) is stored with the run and the run's
        segments are traced under it. Empty with ``traces=False``. Blocks while the provider flushes.
        """
        if self._tracer is None:
            return {}
        attributes = {"gen_ai.conversation.id": session_id, "orchestrator.request.id": request_id}
        if self.agent_name:
            attributes["gen_ai.agent.name"] = self.agent_name
        span = self._tracer.start_span(
            "orchestrator.run", context=otel_context.Context(), kind=SpanKind.INTERNAL, attributes=attributes
        )
        span.end()
        if not span.get_span_context().is_valid:
            return {}
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        if callable(flush):
            flush()
        kept: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(kept, context=trace.set_span_in_context(span))
        return kept

    # -- hooks -------------------------------------------------------------------------------------------------------

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        if event.request_id and event.request_id != context.request_id:
            return
        request = self._begin(context)
        span = request.span
        if isinstance(event, TransitionEvent):
            span.add_event(
                "orchestrator.transition",
                {
                    "orchestrator.machine": event.machine,
                    "orchestrator.region": event.region,
                    "orchestrator.source": event.source,
                    "orchestrator.trigger": event.trigger,
                    "orchestrator.dest": event.dest,
                },
            )
        elif isinstance(event, RunStartedEvent):
            if self.capture_content:
                span.set_attribute("gen_ai.input.messages", _content([event.input]))
        elif event.name in _WAIT_EVENTS:
            kind = _WAIT_EVENTS[event.name]
            call_id = str(getattr(event, "tool_call_id", ""))
            request.waits[call_id] = (kind, time.monotonic())
            attributes = {"gen_ai.tool.call.id": call_id}
            tool_name = getattr(event, "tool_name", None)
            if isinstance(tool_name, str):
                attributes["gen_ai.tool.name"] = tool_name
            span.add_event(f"orchestrator.{kind}.waiting", attributes)
        elif isinstance(event, _TOOL_ENDS):
            self._answered(request, event.call.id)
        elif isinstance(event, RunCompletedEvent):
            if self.capture_content:
                span.set_attribute("gen_ai.output.messages", _content([event.result]))
            self._end(context, "completed")
        elif isinstance(event, RunFailedEvent):
            self._end(context, "failed", event.error)
        elif isinstance(event, RunCancelledEvent):
            self._end(context, "cancelled")
        elif event.name == "run_parked":
            span.add_event("orchestrator.run.parked", {"orchestrator.waiting": list(getattr(event, "waiting", ()))})
            self._end(context, "parked")
        elif event.name == "run_resumed":
            span.add_event("orchestrator.run.resumed", {"orchestrator.phase": str(getattr(event, "phase", ""))})

    def _answered(self, request: _Request, call_id: str) -> None:
        """A waiting call went on (it runs, or it has its result): its wait is over."""
        wait = request.waits.pop(call_id, None)
        if wait is None:
            return
        kind, since = wait
        request.span.add_event(f"orchestrator.{kind}.answered", {"gen_ai.tool.call.id": call_id})
        if self._instruments is not None:
            self._instruments.waited(kind, time.monotonic() - since, request.attributes)

    async def on_model_request(
        self, context: AgentRunContext, request: ModelRequest, call_next: CallNextModel
    ) -> AsyncIterator[ModelEvent]:
        mine = self._begin(context)
        attributes = {key: value for key, value in mine.attributes.items() if key != "gen_ai.agent.name"}
        attributes["gen_ai.operation.name"] = "chat"
        model_name = attributes.get("gen_ai.request.model")
        span: trace.Span = trace.INVALID_SPAN
        if self._tracer is not None:
            span = self._tracer.start_span(
                f"chat {model_name}" if model_name else "chat",
                context=mine.context,
                kind=SpanKind.CLIENT,
                attributes=attributes,
            )
            if self.capture_content:
                span.set_attribute("gen_ai.input.messages", _content(request.messages))
        started = time.monotonic()
        completed: ResponseCompletedEvent | None = None
        error: BaseException | None = None
        stream = call_next(request)
        try:
            async for event in stream:
                if isinstance(event, ResponseCompletedEvent):
                    completed = event
                yield event
        except BaseException as caught:
            error = caught
            raise
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()
            self._model_done(span, attributes, completed, error, time.monotonic() - started)

    def _model_done(
        self,
        span: trace.Span,
        attributes: dict[str, str],
        completed: ResponseCompletedEvent | None,
        error: BaseException | None,
        duration: float,
    ) -> None:
        usage = completed.usage if completed is not None else None
        if completed is not None:
            reason: StopReason = completed.stop_reason or ("tool_use" if completed.message.tool_calls else "end_turn")
            span.set_attribute("gen_ai.response.finish_reasons", [FINISH_REASONS.get(reason, reason)])
            if usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            if self.capture_content:
                span.set_attribute("gen_ai.output.messages", _content([completed.message]))
        if error is not None:
            _fail(span, error)
        span.end()
        if self._instruments is not None:
            self._instruments.model_call(attributes, duration, usage, error)

    async def on_tool_call(self, context: AgentRunContext, call: ToolCall, call_next: CallNextTool) -> ToolResult:
        mine = self._begin(context)
        self._answered(mine, call.id)
        attributes: dict[str, str] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        span: trace.Span = trace.INVALID_SPAN
        if self._tracer is not None:
            span = self._tracer.start_span(
                f"execute_tool {call.name}", context=mine.context, kind=SpanKind.INTERNAL, attributes=attributes
            )
            if self.capture_content:
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps(dict(call.arguments), default=str))
        started = time.monotonic()
        status = "failed"
        try:
            if self._tracer is None:  # no span of ours: the caller's stays current
                result = await call_next(call)
            else:
                with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                    result = await call_next(call)
            status = result.status
            span.set_attribute("orchestrator.tool.status", result.status)
            if result.status != "succeeded":
                span.set_status(Status(StatusCode.ERROR, f"tool result {result.status}"))
                span.set_attribute("error.type", f"tool_{result.status}")
            if self.capture_content:
                span.set_attribute("gen_ai.tool.call.result", str(result.content))
            return result
        except BaseException as error:
            _fail(span, error)
            raise
        finally:
            span.end()
            if self._instruments is not None:
                self._instruments.tool_call(call.name, status, time.monotonic() - started)


def _fail(span: trace.Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_attribute("error.type", type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def _extract(carrier: Mapping[str, str], prefix: str) -> otel_context.Context | None:
    """The context held under ``prefix`` in a carrier (None when it holds none)."""
    fields = {key[len(prefix) :]: value for key, value in carrier.items() if key.startswith(prefix)}
    if "traceparent" not in fields:
        return None
    return TraceContextTextMapPropagator().extract(fields, context=otel_context.Context())

"""A durable run's W3C trace context: taken where the run is started, made current where it is carried.

The run store keeps one trace context per run (``traceparent``, and ``tracestate`` when there is one): the
span that was current where the run was started, or else the ``orchestrator.run`` span the first worker that
runs it makes (``TraceAnchor``). Every process that runs a segment of the run runs it with that context
current, so the segment's ``invoke_agent`` span is its child, in its trace. None of this imports OpenTelemetry
unless the process has imported it already (a process that never did has no span to carry).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

__all__ = ["TraceAnchor", "current_trace_context", "traced_under"]

_KEYS = ("traceparent", "tracestate")


@runtime_checkable
class TraceAnchor(Protocol):
    """An extension that can start a run's trace when nothing was current where the run was started."""

    def anchor_trace(self, session_id: str, request_id: str) -> dict[str, str]:
        """Record a root span for the run, ended and exported before this returns; its W3C trace context
        (empty when no span is recorded). Blocks while the span is exported: call it from a thread."""
        ...


def current_trace_context() -> dict[str, str] | None:
    """The W3C trace context of the span current in this task (None when there is none, or no OpenTelemetry)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return {key: value for key, value in carrier.items() if key in _KEYS} or None


@contextmanager
def traced_under(trace_context: Mapping[str, str] | None) -> Iterator[None]:
    """Make the span ``trace_context`` names current while the block runs (spans started in it are its
    children); nothing when it is None or not a valid W3C trace context."""
    if not trace_context or "traceparent" not in trace_context:
        yield
        return
    try:
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # no OpenTelemetry here: nothing records spans to put under it
        yield
        return
    extracted = TraceContextTextMapPropagator().extract(
        {key: trace_context[key] for key in _KEYS if key in trace_context}, context=otel_context.Context()
    )
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        yield
        return
    token = otel_context.attach(extracted)
    try:
        yield
    finally:
        otel_context.detach(token)

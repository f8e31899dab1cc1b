"""The opt-in ``GET /metrics`` route: a Prometheus registry in the text exposition format.

``prometheus_client`` is imported only when the route is asked for (``create_app(..., metrics=True)``); the
``otel`` extra installs it with the OpenTelemetry exporter that fills the registry.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

METRICS_PATH = "/metrics"


class MetricsUnavailable(ImportError):
    """``create_app(..., metrics=...)`` was asked for metrics, but ``prometheus_client`` is not installed."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"/metrics needs prometheus_client (pip install 'orchestrator[otel]'): {reason}")
        self.reason = reason


def metrics_route(registry: Any) -> Route:
    """The ``/metrics`` route over ``registry`` (a ``prometheus_client.CollectorRegistry``; True: the default one)."""
    try:
        import prometheus_client
    except ImportError as missing:
        raise MetricsUnavailable(str(missing)) from missing
    chosen = prometheus_client.REGISTRY if registry is True else registry
    if not isinstance(chosen, prometheus_client.CollectorRegistry):
        raise TypeError(f"metrics must be a bool or a prometheus_client CollectorRegistry, got {registry!r}")

    async def metrics(request: Request) -> Response:
        return Response(prometheus_client.generate_latest(chosen), media_type=prometheus_client.CONTENT_TYPE_LATEST)

    return Route(METRICS_PATH, metrics, methods=["GET"])

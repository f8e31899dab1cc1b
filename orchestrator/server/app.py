"""``create_app``: the Starlette application serving one agent."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources

import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from orchestrator.agent import Agent, AgentClient
from orchestrator.server.backend import DEFAULT_RETAINED_RUNS, Backend, LocalBackend
from orchestrator.server.bodies import DEFAULT_MAX_BODY_BYTES
from orchestrator.server.errors import HTTPRefusal
from orchestrator.server.guard import CONSOLE_PATHS, CONSOLE_PREFIXES, HEALTH_PATH, TokenGuard
from orchestrator.server.hosts import HostGuard
from orchestrator.server.idempotency import DEFAULT_CAPACITY
from orchestrator.server.origins import OriginGuard
from orchestrator.server.routes import Service
from orchestrator.store.errors import StoreUnavailable


@attrs.frozen
class ServerSettings:
    """How the service guards itself: a bearer token, the hosts and origins it serves, body and memory limits."""

    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    idempotency_keys: int = DEFAULT_CAPACITY
    console: bool = True
    allowed_hosts: tuple[str, ...] | None = None
    allowed_origins: tuple[str, ...] = ()


def _client(agent: Agent | AgentClient) -> AgentClient:
    if isinstance(agent, AgentClient):
        return agent
    if isinstance(agent, Agent):
        return AgentClient(agent)
    raise TypeError(f"create_app needs an Agent or an AgentClient, got {type(agent).__name__}")


async def _refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPRefusal)
    return error.response()


async def _store_unavailable(request: Request, error: Exception) -> Response:
    # A run store whose database cannot be reached (a cluster's web node): the client may retry.
    return HTTPRefusal(503, "StoreUnavailable", str(error)).response({"Retry-After": "1"})


async def _not_found(request: Request, error: Exception) -> Response:
    return JSONResponse({"error": {"type": "NotFound", "message": f"no route {request.url.path}"}}, status_code=404)


async def _method_not_allowed(request: Request, error: Exception) -> Response:
    message = f"{request.method} is not allowed on {request.url.path}"
    return JSONResponse({"error": {"type": "MethodNotAllowed", "message": message}}, status_code=405)


def create_app(
    agent: Agent | AgentClient | Backend,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    idempotency_keys: int = DEFAULT_CAPACITY,
    console: bool = True,
    retained_runs: int = DEFAULT_RETAINED_RUNS,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] = (),
    metrics: object = False,
) -> ASGIApp:
    """The ASGI application for ``agent`` (an Agent or its client, or another Backend such as a web node's).

    Serve it with hypercorn's trio worker (``hypercorn.trio.serve``) or mount
    it in a trio ASGI application: its requests run in the serving trio loop.
    ``token`` guards every route but ``/health`` and the console's page and
    files (which hold no data); ``max_body_bytes`` caps
    request bodies; ``idempotency_keys`` bounds the remembered answers;
    ``retained_runs`` is how many finished runs of an Agent or AgentClient
    stay reachable (events, state, trace) before the oldest answer 404 (a
    Backend given as it is keeps its own setting).

    ``allowed_hosts`` are the names (``name``, ``name:port``, ``*``) a request's
    ``Host`` must give, else 403; None checks no Host (the embedding
    application does). A POST, PUT, PATCH or DELETE from a browser page of
    another origin than the server's own is refused (403) unless its origin is
    in ``allowed_origins`` (``scheme://host[:port]``), which also get CORS
    answers. ValueError when a host or origin is malformed.

    ``metrics=True`` serves ``GET /metrics`` from prometheus_client's default
    registry (or from the ``CollectorRegistry`` given instead), behind the
    token like the other routes; see docs/observability.md.
    """
    settings = ServerSettings(
        token,
        max_body_bytes,
        idempotency_keys,
        console,
        None if allowed_hosts is None else tuple(allowed_hosts),
        tuple(allowed_origins),
    )
    backend: Backend
    if isinstance(agent, (Agent, AgentClient)):
        backend = LocalBackend(_client(agent), retained_runs=retained_runs)
    else:
        backend = agent
    service = Service(backend, settings.max_body_bytes, settings.idempotency_keys)
    routes: list[BaseRoute] = [
        Route("/health", service.health, methods=["GET"]),
        Route("/openapi.json", service.openapi, methods=["GET"]),
        Route("/sessions", service.list_sessions, methods=["GET"]),
        Route("/sessions/{session_id}", service.show_session, methods=["GET"]),
        Route("/sessions/{session_id}/export", service.export_session, methods=["GET"]),
        Route("/sessions/{session_id}/runs", service.start_run, methods=["POST"]),
        Route("/sessions/{session_id}/events", service.post_event, methods=["POST"]),
        Route("/runs/{request_id}", service.show_run, methods=["GET"]),
        Route("/runs/{request_id}/events", service.run_events, methods=["GET"]),
        Route("/runs/{request_id}/cancel", service.cancel_run, methods=["POST"]),
        Route("/runs/{request_id}/trace", service.run_trace, methods=["GET"]),
        Route("/machines/{name}", service.machine, methods=["GET"]),
    ]
    if metrics is not False:
        from orchestrator.server.metrics import metrics_route

        routes.append(metrics_route(metrics))
    if settings.console:
        static = resources.files("orchestrator.server") / "static"
        routes.append(Route("/", service.console, methods=["GET"]))
        routes.append(Mount("/static", StaticFiles(directory=str(static)), name="static"))
    app = Starlette(
        routes=routes,
        exception_handlers={
            HTTPRefusal: _refused,
            StoreUnavailable: _store_unavailable,
            404: _not_found,
            405: _method_not_allowed,
        },
    )
    app.state.service = service
    open_prefixes = CONSOLE_PREFIXES if settings.console else ()
    open_paths = {HEALTH_PATH, *(CONSOLE_PATHS if settings.console else ())}
    guarded: ASGIApp = TokenGuard(app, settings.token, open_paths=open_paths, open_prefixes=open_prefixes)
    guarded = OriginGuard(guarded, settings.allowed_origins)
    if settings.allowed_hosts is not None:
        guarded = HostGuard(guarded, settings.allowed_hosts)
    return guarded

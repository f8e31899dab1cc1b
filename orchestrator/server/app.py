"""``create_app``: the Starlette application serving one agent."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from importlib import resources

import anyio
import attrs
import sniffio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.agent import Agent, AgentClient
from orchestrator.host import AgentHost
from orchestrator.server.backend import DEFAULT_RETAINED_RUNS, Backend, LocalBackend
from orchestrator.server.bodies import DEFAULT_MAX_BODY_BYTES
from orchestrator.server.deletion import session_deletion
from orchestrator.server.dispatch import ExceptionHandler, HotRoutes
from orchestrator.server.drain import DEFAULT_GRACE_SECONDS, Drain, DrainGuard, drained
from orchestrator.server.errors import HTTPRefusal, send_refusal
from orchestrator.server.guard import CONSOLE_PATHS, CONSOLE_PREFIXES, HEALTH_PATH, TokenGuard
from orchestrator.server.hosted import HostBackend
from orchestrator.server.hosts import HostGuard
from orchestrator.server.idempotency import DEFAULT_CAPACITY
from orchestrator.server.identity import Authenticate, AuthGuard, Authorize, OwnedBackend, SessionNotFound, owner_only
from orchestrator.server.origins import OriginGuard
from orchestrator.server.protocols.a2a import CARD_PATH, a2a_routes, card_info_of
from orchestrator.server.protocols.routes import protocol_routes
from orchestrator.server.retention import prune_forever, pruner_of
from orchestrator.server.routes import Service
from orchestrator.server.streams import StopReason, asgi_server_stopping
from orchestrator.store.errors import StoreUnavailable
from orchestrator.store.retention import Retention


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


async def _session_not_found(request: Request, error: Exception) -> Response:
    # Unknown, or another principal's: the same answer either way.
    assert isinstance(error, SessionNotFound)
    return HTTPRefusal(404, "NotFound", str(error)).response()


async def _not_found(request: Request, error: Exception) -> Response:
    return JSONResponse({"error": {"type": "NotFound", "message": f"no route {request.url.path}"}}, status_code=404)


async def _method_not_allowed(request: Request, error: Exception) -> Response:
    message = f"{request.method} is not allowed on {request.url.path}"
    return JSONResponse({"error": {"type": "MethodNotAllowed", "message": message}}, status_code=405)


class TrioLoopOnly:
    """Answers 500 with the reason when an agent that lives in the serving trio loop is served by another loop.

    An Agent or AgentClient given to ``create_app`` runs its requests in the loop
    that serves it, which must be trio's; under asyncio an ``AgentHost`` carries it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or sniffio.current_async_library() == "trio":
            await self.app(scope, receive, send)
            return
        message = (
            "this app serves an Agent in the serving trio loop, and this server runs another loop: "
            "give create_app an AgentHost (orchestrator.host) to serve under asyncio"
        )
        if scope["type"] == "http":
            await send_refusal(send, 500, "WrongEventLoop", message)
            return
        raise RuntimeError(message)


def create_app(
    agent: Agent | AgentClient | AgentHost | Backend,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    idempotency_keys: int = DEFAULT_CAPACITY,
    console: bool = True,
    retained_runs: int = DEFAULT_RETAINED_RUNS,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] = (),
    metrics: object = False,
    stop_streams: Callable[[], str | None] | None = None,
    drain: Drain | None = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    authenticate: Authenticate | None = None,
    authorize: Authorize | None = None,
    retention: Retention | None = None,
) -> ASGIApp:
    """The ASGI application for ``agent``: an Agent or its client, an AgentHost, or a Backend (a web node's).

    Given an Agent or AgentClient, serve it with hypercorn's trio worker
    (``hypercorn.trio.serve``) or mount it in a trio ASGI application: its
    requests run in the serving trio loop. Given an ``AgentHost``, serve it
    with any ASGI server (uvicorn, hypercorn's asyncio worker) or mount it in a
    FastAPI or Starlette application: the routes run on the server's loop and
    the agent in the host's thread. Nothing depends on the app's lifespan (its shutdown, when the
    server runs it, drains: see ``drain``; while it runs, one task asks for all open event streams
    whether they must end, instead of one timer each), and
    under a mount the console and the links it answers follow the mount's prefix.
    Open event streams end with an ``event: closing`` frame when the server
    shuts down or the host closes (see docs/asyncio.md).
    ``token`` guards every route but ``/health``, the A2A agent card
    (docs/a2a.md) and the console's page and files (which hold no data); ``max_body_bytes`` caps
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
    ``stop_streams`` says why open event streams must end now (a server's
    shutdown), or None while they may go on; it is asked a few times a second.
    uvicorn's shutdown and an AgentHost's closing end them without it.
    Once ``drain`` has begun, a request that would start a run gets 503 ``Draining`` with
    ``Retry-After`` (answers, cancels and reads go on; see docs/operations.md). An ASGI lifespan
    shutdown begins it and waits up to ``grace_seconds`` for the runs of this process that work.
    With ``retention``, the app's lifespan prunes ended runs and idle sessions past it (a pass at
    startup, then every ``retention.every`` seconds; see docs/operations.md). TypeError when
    ``retention`` is not a Retention.

    ``authenticate(headers)`` (sync or async) gives the principal of each request, or None for a 401;
    it replaces ``token`` (giving both is a ValueError). A session then belongs to the principal that
    started it, and ``authorize(principal, action, session)`` (sync or async; default: the owner alone)
    decides every action on it; a session a principal may not act on answers as an unknown one. See
    docs/identity.md.
    """
    if authenticate is not None and token is not None:
        raise ValueError(
            "give create_app a token or an authenticate function, not both: authenticate replaces the token check"
            " (check the bearer token in it)"
        )
    if authorize is not None and authenticate is None:
        raise ValueError("authorize needs authenticate: without it every request is the one principal 'local'")
    if retention is not None and not isinstance(retention, Retention):
        raise TypeError(f"retention must be a Retention or None, got {type(retention).__name__}")
    settings = ServerSettings(
        token,
        max_body_bytes,
        idempotency_keys,
        console,
        None if allowed_hosts is None else tuple(allowed_hosts),
        tuple(allowed_origins),
    )
    backend: Backend
    stop_reasons: list[StopReason] = [asgi_server_stopping]
    if stop_streams is not None:
        stop_reasons.append(stop_streams)
    if isinstance(agent, (Agent, AgentClient)):
        backend = LocalBackend(_client(agent), retained_runs=retained_runs)
    elif isinstance(agent, AgentHost):
        hosted = HostBackend(agent, retained_runs=retained_runs)
        stop_reasons.append(hosted.closing)
        backend = hosted
    else:
        backend = agent
    served = OwnedBackend(backend, None if authenticate is None else authorize or owner_only)
    service = Service(served, settings.max_body_bytes, settings.idempotency_keys, stop_reasons)
    routes: list[BaseRoute] = [
        Route("/health", service.health, methods=["GET"]),
        Route("/openapi.json", service.openapi, methods=["GET"]),
        Route("/sessions", service.list_sessions, methods=["GET"]),
        Route("/sessions/{session_id}", service.show_session, methods=["GET"]),
        Route("/sessions/{session_id}/export", service.export_session, methods=["GET"]),
        Route("/sessions/{session_id}", session_deletion(served), methods=["DELETE"]),
        Route("/sessions/{session_id}/runs", service.start_run, methods=["POST"]),
        Route("/sessions/{session_id}/fork", service.fork_session, methods=["POST"]),
        Route("/sessions/{session_id}/title", service.set_title, methods=["PUT"]),
        Route("/sessions/{session_id}/events", service.post_event, methods=["POST"]),
        Route("/runs/{request_id}", service.show_run, methods=["GET"]),
        Route("/runs/{request_id}/events", service.run_events, methods=["GET"]),
        Route("/runs/{request_id}/cancel", service.cancel_run, methods=["POST"]),
        Route("/runs/{request_id}/trace", service.run_trace, methods=["GET"]),
        Route("/machines/{name}", service.machine, methods=["GET"]),
        *protocol_routes(served, settings.max_body_bytes),
    ]
    routes += a2a_routes(service, card_info_of(agent), bearer=settings.token is not None)
    if metrics is not False:
        from orchestrator.server.metrics import metrics_route

        routes.append(metrics_route(metrics))
    if settings.console:
        static = resources.files("orchestrator.server") / "static"
        routes.append(Route("/", service.console, methods=["GET"]))
        routes.append(Mount("/static", StaticFiles(directory=str(static)), name="static"))
    drain = Drain() if drain is None else drain

    if retention is not None:
        pruner_of(backend)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as background:
            # Open streams are asked whether they must end all at once; without a lifespan, each asks for itself.
            background.start_soon(service.stream_stops.run)
            if retention is not None:
                background.start_soon(prune_forever, backend, retention)
            yield
            background.cancel_scope.cancel()
        await drained(backend, drain, grace_seconds)

    errors: dict[type[Exception], ExceptionHandler] = {
        HTTPRefusal: _refused,
        StoreUnavailable: _store_unavailable,
        SessionNotFound: _session_not_found,
    }
    app = Starlette(
        lifespan=lifespan,
        routes=routes,
        exception_handlers={**errors, 404: _not_found, 405: _method_not_allowed},
    )
    app.state.service = service
    open_prefixes = CONSOLE_PREFIXES if settings.console else ()
    open_paths = {HEALTH_PATH, CARD_PATH, *(CONSOLE_PATHS if settings.console else ())}
    inner: ASGIApp = DrainGuard(HotRoutes(app, service.start_run, service.run_events, errors), drain)
    guarded: ASGIApp
    if authenticate is not None:
        guarded = AuthGuard(inner, authenticate, open_paths=open_paths, open_prefixes=open_prefixes)
    else:
        guarded = TokenGuard(inner, settings.token, open_paths=open_paths, open_prefixes=open_prefixes)
    if isinstance(backend, LocalBackend):
        guarded = TrioLoopOnly(guarded)
    guarded = OriginGuard(guarded, settings.allowed_origins)
    if settings.allowed_hosts is not None:
        guarded = HostGuard(guarded, settings.allowed_hosts)
    return guarded

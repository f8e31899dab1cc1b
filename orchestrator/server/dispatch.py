"""The routes every run takes, dispatched before Starlette's router: starting a run and following its events.

``HotRoutes`` answers ``POST /sessions/{session_id}/runs`` and ``GET
/runs/{request_id}/events`` by calling the same ``Service`` methods the
router calls, with the same exception handlers and the same answer to an
unexpected error (Starlette's ``ServerErrorMiddleware``: a plain 500, the
error raised on to the server); every other request goes on to the
application. It sits inside the guards (Host, Origin, token or identity,
drain), so they apply to it unchanged. What it saves is per request: the
router's scan of every route, and the exception layers' wrapping of each
message sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.server.guard import route_path

Handler = Callable[[Request], Awaitable[Response]]
ExceptionHandler = Callable[[Request, Exception], Awaitable[Response]]

_SESSIONS, _RUNS_TAIL = "/sessions/", "/runs"
_RUNS, _EVENTS_TAIL = "/runs/", "/events"


def _param(path: str, head: str, tail: str) -> str | None:
    """The one path segment between ``head`` and ``tail`` (as Starlette's ``{name}`` matches it), or None."""
    if len(path) <= len(head) + len(tail) or not path.startswith(head) or not path.endswith(tail):
        return None
    value = path[len(head) : -len(tail)]
    return None if "/" in value else value


class HotRoutes:
    """Serves ``start_run`` and ``run_events`` directly; hands every other request to ``app``.

    ``exception_handlers`` are the application's, by exception class (the nearest class of a raised error's
    MRO answers); an error none of them takes gets Starlette's plain 500 and is raised on.
    """

    def __init__(
        self,
        app: ASGIApp,
        start_run: Handler,
        run_events: Handler,
        exception_handlers: Mapping[type[Exception], ExceptionHandler],
    ) -> None:
        self.app = app
        handlers = dict(exception_handlers)
        self._start_run = ServerErrorMiddleware(_Endpoint(start_run, handlers))
        self._run_events = ServerErrorMiddleware(_Endpoint(run_events, handlers))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method = scope["method"]
            if method == "POST":
                session_id = _param(route_path(scope), _SESSIONS, _RUNS_TAIL)
                if session_id is not None:
                    scope["path_params"] = {"session_id": session_id}
                    await self._start_run(scope, receive, send)
                    return
            elif method == "GET":
                request_id = _param(route_path(scope), _RUNS, _EVENTS_TAIL)
                if request_id is not None:
                    scope["path_params"] = {"request_id": request_id}
                    await self._run_events(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class _Endpoint:
    """One route's handler as an ASGI app, its errors answered by the application's exception handlers."""

    def __init__(self, handler: Handler, exception_handlers: dict[type[Exception], ExceptionHandler]) -> None:
        self.handler = handler
        self.exception_handlers = exception_handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await self.handler(request)
        except Exception as error:
            answer = self._handler_for(error)
            if answer is None:
                raise
            response = await answer(request, error)
        await response(scope, receive, send)

    def _handler_for(self, error: Exception) -> ExceptionHandler | None:
        for kind in type(error).__mro__:
            found = self.exception_handlers.get(kind)
            if found is not None:
                return found
        return None

"""The routes: each a method of ``Service``, which holds the agent's client.

Bodies and refusals are JSON; a refusal is ``{"error": {"type", "message"}}``
with a 4xx status (see ``orchestrator.server.openapi`` for every route).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from importlib import resources
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response

from machines.definition import MachineDefinition
from machines.diagrams import composed_diagram, graphviz_available, machine_diagram
from machines.registry import all_definitions
from orchestrator.errors import SessionBusy
from orchestrator.observe.trace import trace_mermaid
from orchestrator.runtime.handle import EventsExpired, RunPruned, UnknownRun
from orchestrator.server.backend import Backend, IdempotencyKeyReused, NotSupported, RunExists, RunStart, RunView
from orchestrator.server.bodies import (
    external_event,
    fork_input,
    read_object,
    run_bounds,
    run_input,
    title_input,
    whole_number,
)
from orchestrator.server.errors import HTTPRefusal, not_found, run_gone
from orchestrator.server.idempotency import Answer, IdempotencyCache
from orchestrator.server.identity import current_principal
from orchestrator.server.ids import checked_id
from orchestrator.server.openapi import openapi_document
from orchestrator.server.streams import SSE_HEADERS, EventStreamResponse, StopReason, StreamStops, first_reason
from orchestrator.store.fork import ForkRefused
from orchestrator.wire.sse import sse_error_frame, sse_frame

__all__ = ["SSE_HEADERS", "Service", "sse_error_frame", "sse_frame"]

logger = logging.getLogger(__name__)


def _path_id(request: Request, name: str) -> str:
    return checked_id(request.path_params[name], name)


def _after(request: Request) -> int:
    """Where a stream resumes: ``Last-Event-ID`` (as browsers send it), else ``?after=``, else 0."""
    raw = request.headers.get("last-event-id")
    if raw is None:
        raw = request.query_params.get("after", "0")
    return whole_number(raw, "Last-Event-ID (or ?after=)")


Handler = Callable[[Request], Awaitable[Response]]


def _idempotent(method: Callable[[Service, Request, dict[str, Any]], Awaitable[Answer]]) -> Callable[..., Any]:
    """Reads the body once and replays the first answer of a repeated Idempotency-Key."""

    @functools.wraps(method)
    async def handler(self: Service, request: Request) -> Response:
        body = await read_object(request, self.max_body_bytes)
        key = request.headers.get("idempotency-key")
        if key is None:
            answer = await method(self, request, body)
            return JSONResponse(answer.body, status_code=answer.status)
        self.idempotency.check_key(key)
        scope = f"{current_principal.get()} {request.method} {request.url.path}"  # a key replays to its sender only
        fingerprint = self.idempotency.fingerprint(body)
        answer = await self.idempotency.once(scope, key, fingerprint, lambda: method(self, request, body))
        return JSONResponse(answer.body, status_code=answer.status, headers={"Idempotent-Replay": key})

    return handler


class Service:
    def __init__(
        self, backend: Backend, max_body_bytes: int, idempotency_keys: int, stop_reasons: Iterable[StopReason] = ()
    ) -> None:
        self.backend = backend
        self.stop_reasons = tuple(stop_reasons)
        self.stream_stops = StreamStops(self.stopping)
        """Asks ``stopping`` for every open stream of ``run_events`` at once, while the app's lifespan runs it."""
        self.max_body_bytes = max_body_bytes
        self.idempotency = IdempotencyCache(idempotency_keys)
        self._diagrams: dict[str, tuple[str, str]] = {}

    async def _run(self, request_id: str) -> RunView:
        try:
            return await self.backend.run(request_id)
        except RunPruned as pruned:
            raise run_gone(pruned) from None
        except UnknownRun:
            raise not_found(f"no live or recent run {request_id!r}") from None

    # routes -----------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "running": self.backend.running()})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())

    async def console(self, request: Request) -> Response:
        # The page and its files are the same for everyone; the token guards the data the page asks for.
        page = resources.files("orchestrator.server") / "static" / "index.html"
        return FileResponse(str(page), media_type="text/html")

    async def list_sessions(self, request: Request) -> Response:
        return JSONResponse({"sessions": await self.backend.sessions()})

    async def show_session(self, request: Request) -> Response:
        session_id = _path_id(request, "session_id")
        found = await self.backend.session(session_id)
        if found is None:
            raise not_found(f"no session {session_id!r}")
        return JSONResponse(found)

    async def export_session(self, request: Request) -> Response:
        """The session as a Markdown document (``?format=markdown``, the default) or a self-contained HTML page."""
        from orchestrator.observe.export import to_html, to_markdown
        from orchestrator.wire.format import decode_message

        session_id = _path_id(request, "session_id")
        kind = request.query_params.get("format", "markdown")
        if kind not in ("markdown", "html"):
            raise HTTPRefusal(400, "BadRequest", f"format must be markdown or html, got {kind!r}")
        found = await self.backend.session(session_id)
        if found is None:
            raise not_found(f"no session {session_id!r}")
        messages = [decode_message(message) for message in found["messages"]]
        if kind == "html":
            return Response(to_html(messages, session_id), media_type="text/html; charset=utf-8")
        return Response(to_markdown(messages, session_id), media_type="text/markdown; charset=utf-8")

    @_idempotent
    async def fork_session(self, request: Request, body: dict[str, Any]) -> Answer:
        """A new session holding this one's messages (``turn``: up to the end of that turn); 201 with its id."""
        session_id = _path_id(request, "session_id")
        turn, target = fork_input(body)
        try:
            new, copied = await self.backend.fork(session_id, target, turn)
        except ForkRefused as refused:
            status = {"unknown": 404, "exists": 409}.get(refused.kind, 400)
            kind = {"unknown": "NotFound", "exists": "SessionExists"}.get(refused.kind, "BadRequest")
            raise HTTPRefusal(status, kind, refused.reason) from None
        except SessionBusy as busy:
            raise HTTPRefusal(409, "SessionBusy", f"{busy}; fork it when the run has ended") from None
        except NotSupported as unsupported:
            raise HTTPRefusal(501, "NotSupported", unsupported.reason) from None
        return Answer(201, {"session_id": new, "forked_from": session_id, "messages": copied})

    async def set_title(self, request: Request) -> Response:
        """Set the session's title; 200 with it."""
        session_id = _path_id(request, "session_id")
        title = title_input(await read_object(request, self.max_body_bytes))
        found = await self.backend.set_title(session_id, title)
        if not found:
            raise not_found(f"no session {session_id!r}")
        return JSONResponse({"session_id": session_id, "title": title})

    @_idempotent
    async def start_run(self, request: Request, body: dict[str, Any]) -> Answer:
        session_id = _path_id(request, "session_id")
        message, request_id = run_input(body)
        usage_limits, deadline = run_bounds(body)
        key = request.headers.get("idempotency-key")
        try:
            started = await self.backend.start(
                RunStart(
                    session_id,
                    message,
                    request_id=request_id,
                    idempotency_key=key,
                    usage_limits=usage_limits,
                    deadline=deadline,
                )
            )
        except SessionBusy as busy:
            raise HTTPRefusal(409, "SessionBusy", str(busy)) from None
        except RunExists as exists:
            raise HTTPRefusal(409, "RunExists", str(exists)) from None
        except IdempotencyKeyReused as reused:
            raise HTTPRefusal(422, "IdempotencyKeyReused", str(reused)) from None
        events = f"{request.scope.get('root_path', '')}/runs/{started}/events"  # under a mount, its prefix too
        return Answer(202, {"request_id": started, "session_id": session_id, "events": events})

    @_idempotent
    async def post_event(self, request: Request, body: dict[str, Any]) -> Answer:
        session_id = _path_id(request, "session_id")
        event, request_id = external_event(body)
        key = request.headers.get("idempotency-key")
        delivery = await self.backend.deliver(session_id, request_id, event, key)
        if delivery.accepted:
            return Answer(202, {"accepted": list(delivery.accepted)})
        refused = dict(delivery.refused)
        reason = "; ".join(f"{name}: {why}" for name, why in refused.items()) or (
            f"no extension takes {event.name!r} events"
        )
        return Answer(409, {"error": {"type": "EventRefused", "message": reason}, "refused": refused})

    async def show_run(self, request: Request) -> Response:
        return JSONResponse((await self._run(_path_id(request, "request_id"))).json())

    async def run_events(self, request: Request) -> Response:
        """The run's events after the cursor. A run that has ended with nothing after the cursor
        (a reader that saw its terminal event reconnects) is a 204, which tells an EventSource to stop."""
        request_id = _path_id(request, "request_id")
        after = _after(request)
        try:
            ended, batches = await self.backend.follow(request_id, after)
            if ended:
                first = await anext(batches, None)
                if first is None:
                    return Response(status_code=204, headers=SSE_HEADERS)
                batches = _after_first(first, batches)
        except RunPruned as pruned:
            raise run_gone(pruned) from None
        except UnknownRun:
            raise not_found(f"no live or recent run {request_id!r}") from None
        except EventsExpired as expired:
            raise HTTPRefusal(410, "EventsExpired", str(expired)) from None
        return EventStreamResponse(batches, self.stopping, request_id, self.stream_stops)

    def stopping(self) -> str | None:
        """Why open event streams must end now (the server or the backend is stopping), else None."""
        return first_reason(self.stop_reasons)

    async def cancel_run(self, request: Request) -> Response:
        request_id = _path_id(request, "request_id")
        try:
            view, asked = await self.backend.cancel(request_id)
        except RunPruned as pruned:
            raise run_gone(pruned) from None
        except UnknownRun:
            raise not_found(f"no live or recent run {request_id!r}") from None
        return JSONResponse({**view.json(), "cancelled": asked}, status_code=202)

    async def run_trace(self, request: Request) -> Response:
        request_id = _path_id(request, "request_id")
        try:
            steps = await self.backend.transitions(request_id)
            children = await self.backend.child_traces(request_id)
        except RunPruned as pruned:
            raise run_gone(pruned) from None
        except UnknownRun:
            raise not_found(f"no live or recent run {request_id!r}") from None
        return PlainTextResponse(trace_mermaid(steps, children=children), media_type="text/vnd.mermaid")

    async def machine(self, request: Request) -> Response:
        name = request.path_params["name"]
        stem, _, suffix = name.rpartition(".") if "." in name else (name, "", "mmd")
        definitions = all_definitions()
        if stem not in definitions and stem != "composed":
            raise not_found(f"no machine {stem!r}; machines: {', '.join([*definitions, 'composed'])}")
        if suffix == "json":
            if stem == "composed":
                raise not_found("the composed view has no definition of its own; ask for composed.mmd")
            return JSONResponse(_definition_json(definitions[stem]))
        if suffix not in ("mmd", "svg"):
            raise not_found(f"no {suffix!r} form; ask for {stem}.mmd, {stem}.svg or {stem}.json")
        mermaid, dot = await self._diagram(stem, definitions)
        if suffix == "mmd":
            return PlainTextResponse(mermaid, media_type="text/vnd.mermaid")
        from orchestrator.observe.diagrams import dot_program, render_svg

        program = dot_program()
        if program is None or not dot:
            raise not_found("SVG needs Graphviz's dot, which is not installed on this server; ask for .mmd")
        svg = await anyio.to_thread.run_sync(render_svg, dot, program)
        return Response(svg, media_type="image/svg+xml")

    async def _diagram(self, stem: str, definitions: dict[str, MachineDefinition]) -> tuple[str, str]:
        if stem not in self._diagrams:
            dot = graphviz_available()
            if stem == "composed":
                diagram = composed_diagram(definitions, dot=dot)
            else:
                diagram = machine_diagram(definitions[stem], dot=dot)
            self._diagrams[stem] = (diagram.mermaid, diagram.dot or "")
        return self._diagrams[stem]


async def _after_first(
    first: list[dict[str, Any]], rest: AsyncIterator[list[dict[str, Any]]]
) -> AsyncIterator[list[dict[str, Any]]]:
    yield first
    async for batch in rest:
        yield batch


def _definition_json(definition: MachineDefinition) -> dict[str, Any]:
    return {
        "name": definition.name,
        "regions": [
            {
                "name": region.name,
                "initial": region.initial,
                "states": [{"name": s.name, "final": s.final, "doc": s.doc} for s in region.states],
            }
            for region in definition.regions
        ],
    }

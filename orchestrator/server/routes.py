"""The routes: each a method of ``Service``, which holds the agent's client.

Bodies and refusals are JSON; a refusal is ``{"error": {"type", "message"}}``
with a 4xx status (see ``orchestrator.server.openapi`` for every route).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

import anyio.to_thread
import attrs
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse

from machines.definition import MachineDefinition
from machines.diagrams import composed_diagram, graphviz_available, machine_diagram
from machines.registry import all_definitions
from orchestrator import wire
from orchestrator.agent import AgentClient
from orchestrator.config import AgentRunConfig
from orchestrator.errors import SessionBusy
from orchestrator.events import AgentEvent
from orchestrator.handle import EventFollower, EventsExpired, RunHandle, UnknownRun
from orchestrator.pending import PendingCall
from orchestrator.server import sessions
from orchestrator.server.bodies import external_event, read_object, run_input
from orchestrator.server.errors import HTTPRefusal, bad_request, not_found
from orchestrator.server.idempotency import Answer, IdempotencyCache
from orchestrator.server.openapi import openapi_document
from orchestrator.trace import trace_mermaid

MAX_ID_LENGTH = 200
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _path_id(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    if not value.strip() or len(value) > MAX_ID_LENGTH:
        raise bad_request(f"{name} must be 1 to {MAX_ID_LENGTH} characters")
    return value


def sse_frame(event: AgentEvent) -> str:
    """One Server-Sent Event: ``id`` the event's seq, ``event`` its type, ``data`` its wire JSON."""
    return f"id: {event.seq}\nevent: {event.name}\ndata: {wire.dumps(event)}\n\n"


def _after(request: Request) -> int:
    """Where a stream resumes: ``Last-Event-ID`` (as browsers send it), else ``?after=``, else 0."""
    raw = request.headers.get("last-event-id")
    if raw is None:
        raw = request.query_params.get("after", "0")
    raw = raw.strip()
    if not raw.isdigit() or len(raw) > 18:
        raise bad_request("Last-Event-ID (or ?after=) must be a non-negative whole number")
    return int(raw)


def _pending_json(call: PendingCall) -> dict[str, Any]:
    return {**attrs.asdict(call, recurse=False), "payload": dict(call.payload)}


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
        scope = f"{request.method} {request.url.path}"
        fingerprint = self.idempotency.fingerprint(body)
        answer_or_none = self.idempotency.recall(scope, key, fingerprint)
        if answer_or_none is None:
            answer_or_none = await method(self, request, body)
            self.idempotency.remember(scope, key, fingerprint, answer_or_none)
        return JSONResponse(answer_or_none.body, status_code=answer_or_none.status, headers={"Idempotent-Replay": key})

    return handler


class Service:
    def __init__(self, client: AgentClient, max_body_bytes: int, idempotency_keys: int) -> None:
        self.client = client
        self.agent = client.agent
        self.max_body_bytes = max_body_bytes
        self.idempotency = IdempotencyCache(idempotency_keys)
        self._diagrams: dict[str, tuple[str, str]] = {}

    # plumbing ---------------------------------------------------------------

    def _handle(self, request_id: str) -> RunHandle:
        try:
            return self.client.attach(request_id)
        except UnknownRun:
            raise not_found(f"no live or recent run {request_id!r}") from None

    def _live_request(self, session_id: str) -> str | None:
        run = self.agent._live.get(session_id)
        return run.context.request_id if run is not None else None

    def _pending(self, session_id: str | None) -> list[dict[str, Any]]:
        return [_pending_json(call) for call in self.client.pending(session_id)]

    # routes -----------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "running": len(self.agent.running())})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())

    async def console(self, request: Request) -> Response:
        page = resources.files("orchestrator.server") / "static" / "index.html"
        return FileResponse(str(page), media_type="text/html")

    async def list_sessions(self, request: Request) -> Response:
        stored = await sessions.stored_session_ids(self.agent)
        ids = list(dict.fromkeys([*stored, *self.agent.running()]))
        listed = []
        for session_id in ids:
            listed.append(
                {
                    "session_id": session_id,
                    "request_id": self._live_request(session_id),
                    "state": self.agent.state(session_id),
                    "states": self.agent.states(session_id),
                    "pending": self._pending(session_id),
                }
            )
        return JSONResponse({"sessions": listed})

    async def show_session(self, request: Request) -> Response:
        session_id = _path_id(request, "session_id")
        messages = await sessions.history(self.agent, session_id)
        if messages is None:
            raise not_found(f"no session {session_id!r}")
        return JSONResponse(
            {
                "session_id": session_id,
                "request_id": self._live_request(session_id),
                "messages": [wire.encode_message(m) for m in messages],
                "states": self.agent.states(session_id),
                "plan_mode": sessions.plan_mode(self.agent, session_id),
                "pending": self._pending(session_id),
            }
        )

    @_idempotent
    async def start_run(self, request: Request, body: dict[str, Any]) -> Answer:
        session_id = _path_id(request, "session_id")
        message, request_id = run_input(body)
        config = AgentRunConfig(session_id=session_id, request_id=request_id)
        if request_id is not None and self._known_run(request_id):
            raise HTTPRefusal(409, "RunExists", f"a run {request_id!r} already exists")
        try:
            handle = await self.client.start(message, config=config)
        except SessionBusy as busy:
            raise HTTPRefusal(409, "SessionBusy", str(busy)) from None
        body_out = {
            "request_id": handle.request_id,
            "session_id": session_id,
            "events": f"/runs/{handle.request_id}/events",
        }
        return Answer(202, body_out)

    def _known_run(self, request_id: str) -> bool:
        try:
            self.client.attach(request_id)
        except UnknownRun:
            return False
        return True

    @_idempotent
    async def post_event(self, request: Request, body: dict[str, Any]) -> Answer:
        session_id = _path_id(request, "session_id")
        event, request_id = external_event(body)
        config = AgentRunConfig(session_id=session_id, request_id=request_id)
        delivery = await anyio.to_thread.run_sync(lambda: self.client.deliver(event, config=config))
        if delivery.accepted:
            return Answer(202, {"accepted": list(delivery.accepted)})
        refused = dict(delivery.refused)
        reason = "; ".join(f"{name}: {why}" for name, why in refused.items()) or (
            f"no extension takes {event.name!r} events"
        )
        return Answer(409, {"error": {"type": "EventRefused", "message": reason}, "refused": refused})

    async def show_run(self, request: Request) -> Response:
        handle = self._handle(_path_id(request, "request_id"))
        return JSONResponse(
            {
                "request_id": handle.request_id,
                "session_id": handle.session_id,
                "state": handle.state,
                "states": handle.states,
                "done": handle.done,
            }
        )

    async def run_events(self, request: Request) -> Response:
        handle = self._handle(_path_id(request, "request_id"))
        after = _after(request)
        try:
            events = handle.events(after=after)
        except EventsExpired as expired:
            raise HTTPRefusal(410, "EventsExpired", str(expired)) from None
        return StreamingResponse(_frames(events), media_type="text/event-stream", headers=SSE_HEADERS)

    async def cancel_run(self, request: Request) -> Response:
        handle = self._handle(_path_id(request, "request_id"))
        was_done = handle.done
        handle.cancel()
        return JSONResponse(
            {"request_id": handle.request_id, "cancelled": not was_done, "state": handle.state}, status_code=202
        )

    async def run_trace(self, request: Request) -> Response:
        handle = self._handle(_path_id(request, "request_id"))
        return PlainTextResponse(trace_mermaid(handle.transitions), media_type="text/vnd.mermaid")

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
        from orchestrator.diagrams import dot_program, render_svg

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


async def _frames(events: EventFollower) -> AsyncIterator[str]:
    """SSE frames of a run's events, as many per chunk as are ready; ends after the terminal event."""
    while batch := await events.batch():
        yield "".join(sse_frame(event) for event in batch)


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

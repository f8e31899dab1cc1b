"""A2A (JSON-RPC binding, protocol 1.0 and 0.3) over the same ``Backend`` as the native routes.

A task is one request of ours (task id = request id) and a context is a session
(context id = session id). A call waiting for an answer makes its task
``input-required``; the client's next message on that task answers it. A message
on a ``working`` task steers it. Nothing is kept in memory here: every answer is
read from the backend, so a web node serves A2A as a single process does.
See docs/a2a.md for the mapping.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from orchestrator.config import ExternalEvent
from orchestrator.errors import SessionBusy
from orchestrator.messages import UserMessage
from orchestrator.runtime.handle import EventsExpired, RunPruned, UnknownRun
from orchestrator.server.backend import Backend, RunStart, RunView
from orchestrator.server.errors import HTTPRefusal, run_gone
from orchestrator.server.identity import SessionNotFound
from orchestrator.server.protocols.a2a_requests import (
    INTERNAL_ERROR,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    Incoming,
    RpcError,
    blocking_of,
    envelope,
    history_length_of,
    incoming_message,
    invalid,
    optional_id,
    read_request,
    task_id_of,
)
from orchestrator.server.protocols.a2a_waits import Wait, takes_free_text
from orchestrator.server.protocols.a2a_wire import (
    A2AMessage,
    A2ATask,
    CardInfo,
    Version,
    agent_card,
    skills_of,
    stream_artifact,
    stream_status,
    stream_task,
    task_result,
)
from orchestrator.server.routes import Service as NativeService
from orchestrator.server.streams import SSE_HEADERS, StopReason, stream_frames
from orchestrator.store.errors import StoreUnavailable

logger = logging.getLogger(__name__)

CARD_PATH = "/.well-known/agent-card.json"
RPC_PATH = "/a2a"
VERSION_HEADER = "a2a-version"
CANCEL_SETTLE_SECONDS = 10.0
"""How long CancelTask waits for the run to end before it answers with the task as it is."""
_STATES = {"completed": "completed", "failed": "failed", "cancelled": "canceled"}
_STATELESS_EVENTS = frozenset({"text_delta", "reasoning_delta"})
"""Events that change nothing A2A shows of a task: a batch of only these is not looked at again."""


def _text_of(content: object) -> str:
    """The text of a wire message's content (a string, or content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class A2AService:
    """The agent card and the JSON-RPC endpoint, answering from ``backend``."""

    def __init__(
        self, backend: Backend, max_body_bytes: int, card: CardInfo, *, bearer: bool, stopping: StopReason
    ) -> None:
        self.backend = backend
        self.stopping = stopping
        self.max_body_bytes = max_body_bytes
        self.card_info = card
        self.bearer = bearer

    # routes -----------------------------------------------------------------

    async def card(self, request: Request) -> Response:
        endpoint = str(request.base_url).rstrip("/") + RPC_PATH
        return JSONResponse(agent_card(self.card_info, endpoint, bearer=self.bearer))

    async def rpc(self, request: Request) -> Response:
        rpc_id: object = None
        try:
            body = await read_request(request, self.max_body_bytes)
            if isinstance(body.get("id"), (str, int)) and not isinstance(body.get("id"), bool):
                rpc_id = body["id"]  # an id of another type is refused, answered with id null
            kind, version, params = envelope(body, request.headers.get(VERSION_HEADER))
            if kind in ("stream", "subscribe"):
                results = await self._stream(kind, params, version)
                return A2AStream(rpc_id, results, self.stopping)
            result = await self._call(kind, params, version)
            return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "result": result})
        except RpcError as error:
            return JSONResponse(error.json(rpc_id))
        except SessionNotFound as unknown:  # a context of another principal: as an unknown one would be
            return JSONResponse(RpcError(TASK_NOT_FOUND, str(unknown)).json(rpc_id))
        except (HTTPRefusal, StoreUnavailable):
            raise  # answered by the app's handlers: a 4xx with its reason, a 503 to retry
        except Exception as error:  # a fault of ours: logged here, its type told, never a traceback
            logger.exception("A2A %s failed", request.url.path)
            return JSONResponse(RpcError(INTERNAL_ERROR, f"internal error ({type(error).__name__})").json(rpc_id))

    # the envelope -----------------------------------------------------------

    async def _call(self, kind: str, params: Mapping[str, Any], version: Version) -> Any:
        if kind == "send":
            incoming = incoming_message(params)
            blocking = blocking_of(params)
            history_length = history_length_of((params.get("configuration") or {}).get("historyLength"))
            task_id, answered = await self._act(incoming)
            task = await (self._settled(task_id, answered) if blocking else self._task(task_id, answered))
            return task_result(task, version, history_length)
        if kind == "get":
            task = await self._task(task_id_of(params))
            return task.json(version, history_length_of(params.get("historyLength")))
        if kind == "cancel":
            return (await self._cancel(task_id_of(params))).json(version)
        assert kind == "list"
        return await self._list(params, version)

    # the methods ------------------------------------------------------------

    async def _view(self, task_id: str) -> RunView:
        try:
            return await self.backend.run(task_id)
        except RunPruned as pruned:
            raise run_gone(pruned) from None  # HTTP 410, like the native routes: the task existed
        except UnknownRun:
            raise RpcError(TASK_NOT_FOUND, f"no task {task_id!r} (no live or recent request with that id)") from None

    async def _waits(self, view: RunView, answered: Collection[str] = ()) -> list[Wait]:
        pending = await self.backend.pending(view.session_id)
        waits = [Wait.of(p) for p in pending if p.get("request_id") == view.request_id]
        return [wait for wait in waits if wait.tool_call_id not in answered]

    async def _act(self, incoming: Incoming) -> tuple[str, frozenset[str]]:
        """Start a task, answer its waiting calls, or steer it; the task's id and the calls answered."""
        if incoming.task_id is None:
            started = await self._start(incoming)
            if started is not None:
                return started, frozenset()
            view = await self._live_task(incoming)
        else:
            view = await self._view(incoming.task_id)
        if incoming.context_id is not None and incoming.context_id != view.session_id:
            raise invalid(f"task {view.request_id!r} belongs to another context than {incoming.context_id!r}")
        if view.done:
            raise RpcError(
                UNSUPPORTED_OPERATION,
                f"task {view.request_id!r} has ended ({view.state}); send a message without taskId to start a new task",
            )
        waits = await self._waits(view)
        if waits:
            return view.request_id, await self._answer(view, waits, incoming)
        await self._steer(view, incoming)
        return view.request_id, frozenset()

    async def _start(self, incoming: Incoming) -> str | None:
        """A new task of the context; None when the context's session runs a task already."""
        session_id = incoming.context_id or uuid.uuid4().hex
        if incoming.data or not incoming.text.strip():
            if incoming.context_id is not None and await self._live_request(incoming.context_id) is not None:
                return None  # an answer or a steer for the task that runs in the context
            raise invalid("a new task needs a non-blank text part; data parts answer an input-required task")
        try:
            return await self.backend.start(RunStart(session_id, UserMessage(incoming.text)))
        except SessionBusy:
            return None

    async def _live_request(self, session_id: str) -> str | None:
        for session in await self.backend.sessions():
            if session.get("session_id") == session_id and session.get("request_id") is not None:
                return str(session["request_id"])
        return None

    async def _live_task(self, incoming: Incoming) -> RunView:
        """The task that runs in the message's context: a message there answers or steers it."""
        assert incoming.context_id is not None
        request_id = await self._live_request(incoming.context_id)
        if request_id is None:
            raise RpcError(UNSUPPORTED_OPERATION, f"context {incoming.context_id!r} is busy; try again")
        return await self._view(request_id)

    async def _answer(self, view: RunView, waits: list[Wait], incoming: Incoming) -> frozenset[str]:
        by_id = {wait.tool_call_id: wait for wait in waits}
        answers: list[tuple[Wait, dict[str, Any]]] = []
        for data in incoming.data:
            call_id = data.get("toolCallId", data.get("tool_call_id"))
            if call_id is None:
                if len(waits) > 1:
                    raise invalid(f"several calls wait ({sorted(by_id)}): name one as toolCallId in the data part")
                call_id = waits[0].tool_call_id
            if call_id not in by_id:
                raise invalid(f"no call {call_id!r} waits in task {view.request_id!r}; waiting: {sorted(by_id)}")
            answer = {k: v for k, v in data.items() if k not in ("toolCallId", "tool_call_id")}
            answers.append((by_id[call_id], answer))
        if not answers:
            free = [wait for wait in waits if takes_free_text(wait.response_event)]
            if len(free) != 1 or not incoming.texts:
                wanted = "; ".join(f"{w.tool_call_id}: {json.dumps(w.data()['responseSchema'])}" for w in waits)
                raise invalid(f"task {view.request_id!r} waits for an answer: send a data part ({wanted})")
            answers.append((free[0], {"answer": incoming.text}))
        answered: set[str] = set()
        for wait, answer in answers:
            event = ExternalEvent(wait.response_event, {**answer, "tool_call_id": wait.tool_call_id})
            delivery = await self.backend.deliver(view.session_id, view.request_id, event, None)
            if not delivery.accepted:
                raise invalid(f"the answer to {wait.tool_call_id!r} was refused: {delivery.reason}")
            answered.add(wait.tool_call_id)
        return frozenset(answered)

    async def _steer(self, view: RunView, incoming: Incoming) -> None:
        if incoming.data:
            raise invalid(f"no call waits for an answer in task {view.request_id!r}; a working task takes text")
        if not incoming.text.strip():
            raise invalid("a steering message needs a non-blank text part")
        event = ExternalEvent("steering_message", {"content": incoming.text})
        delivery = await self.backend.deliver(view.session_id, view.request_id, event, None)
        if not delivery.accepted:
            raise RpcError(UNSUPPORTED_OPERATION, f"task {view.request_id!r} cannot be steered: {delivery.reason}")

    async def _cancel(self, task_id: str) -> A2ATask:
        view = await self._view(task_id)
        if view.done:
            raise RpcError(TASK_NOT_CANCELABLE, f"task {task_id!r} has ended ({view.state}) and cannot be canceled")
        await self.backend.cancel(task_id)
        with anyio.move_on_after(CANCEL_SETTLE_SECONDS):
            await self._settled(task_id, until=lambda task: task.terminal)
        return await self._task(task_id)

    async def _list(self, params: Mapping[str, Any], version: Version) -> dict[str, Any]:
        context_id = optional_id(params.get("contextId"), "params.contextId")
        tasks: list[dict[str, Any]] = []
        for session in await self.backend.sessions():
            request_id = session.get("request_id")
            if request_id is None or (context_id is not None and session.get("session_id") != context_id):
                continue
            try:
                tasks.append((await self._task(str(request_id))).json(version, 0))
            except RpcError:
                continue  # ended and forgotten between the two reads
        return {"tasks": tasks, "nextPageToken": "", "pageSize": len(tasks), "totalSize": len(tasks)}

    # tasks as A2A sees them ---------------------------------------------------

    async def _task(self, task_id: str, answered: Collection[str] = ()) -> A2ATask:
        """The task now: its state (from the run and its waiting calls), its input, answer and failure."""
        view = await self._view(task_id)
        events = await self._events(view)
        history: list[A2AMessage] = []
        answer: str | None = None
        status_text: str | None = None
        for event in events:
            if event["type"] == "run_started":
                history.append(A2AMessage(f"{task_id}-input", "user", (_text_of(event["input"].get("content")),)))
            elif event["type"] == "run_completed":
                answer = _text_of(event["result"].get("content"))
            elif event["type"] == "run_failed":
                error = event.get("error") or {}
                status_text = f"{error.get('type', 'Error')}: {error.get('message', '')}"
        if view.done:
            state = _STATES.get(view.state or "", "failed")
            if answer is not None:
                history.append(A2AMessage(f"{task_id}-answer", "agent", (answer,)))
            message = A2AMessage(f"{task_id}-status", "agent", (status_text,)) if status_text else None
            return A2ATask(task_id, view.session_id, state, message, answer, tuple(history))
        waits = await self._waits(view, answered)
        if waits:
            asking = A2AMessage(
                f"{task_id}-ask-{'-'.join(w.tool_call_id for w in waits)}",
                "agent",
                tuple(wait.question() for wait in waits),
                tuple(wait.data() for wait in waits),
            )
            return A2ATask(task_id, view.session_id, "input-required", asking, None, tuple(history))
        state = "submitted" if view.state is None else "working"
        return A2ATask(task_id, view.session_id, state, None, None, tuple(history))

    async def _events(self, view: RunView) -> list[dict[str, Any]]:
        """The run's events: all of them once it has ended, else those there are now (one batch)."""
        try:
            batches = await self.backend.events(view.request_id, 0)
        except (UnknownRun, EventsExpired):
            return []
        if not view.done:
            return await anext(batches, [])
        return [event async for batch in batches for event in batch]

    async def _settled(
        self, task_id: str, answered: Collection[str] = (), until: Callable[[A2ATask], bool] | None = None
    ) -> A2ATask:
        """The task once it is interrupted (ended or waiting for input), following its events until then."""
        async for task, _ in self._changes(task_id, answered):
            if (until or _interrupted)(task):
                return task
        return await self._task(task_id, answered)

    async def _changes(
        self, task_id: str, answered: Collection[str] = ()
    ) -> AsyncIterator[tuple[A2ATask, list[dict[str, Any]]]]:
        """The task after each batch of its events while it runs (with the batch), then as it ended.

        The task is read again only after a batch with more than text deltas in it."""
        try:
            batches = await self.backend.events(task_id, 0)
        except UnknownRun:
            raise RpcError(TASK_NOT_FOUND, f"no task {task_id!r}") from None
        except EventsExpired as expired:
            raise RpcError(TASK_NOT_FOUND, str(expired)) from None
        task = await self._task(task_id, answered)
        yield task, []
        async for batch in batches:
            if any(event["type"] not in _STATELESS_EVENTS for event in batch):
                task = await self._task(task_id, answered)
            yield task, batch
        yield await self._task(task_id, answered), []

    async def _stream(self, kind: str, params: Mapping[str, Any], version: Version) -> AsyncIterator[dict[str, Any]]:
        """Check and act before the stream opens (errors are plain answers), then the stream's results."""
        answered: frozenset[str] = frozenset()
        if kind == "stream":
            task_id, answered = await self._act(incoming_message(params))
        else:
            task_id = task_id_of(params)
            view = await self._view(task_id)
            if view.done:
                raise RpcError(UNSUPPORTED_OPERATION, f"task {task_id!r} has ended ({view.state}): nothing to follow")
        first = await self._task(task_id, answered)
        return self._results(first, answered, version)

    async def _results(
        self, first: A2ATask, answered: frozenset[str], version: Version
    ) -> AsyncIterator[dict[str, Any]]:
        """The task, a status update on each change, the answer's chunks as it streams, the last status."""
        yield stream_task(first, version)
        last = first
        chunks = AnswerChunks(first.task_id, first.context_id, version)
        read = 0  # the seq of the last event read
        if not first.interrupted:
            async for task, batch in self._changes(first.task_id, answered):
                if task.state != last.state and not task.interrupted:
                    yield stream_status(task, version)
                for event in batch:
                    read = event["seq"]
                    for chunk in chunks.take(event):
                        yield chunk
                last = task
                if task.interrupted:
                    break
        if last.terminal:  # it may have ended before the stream read its deltas: they are in its log
            for event in await self._events(await self._view(first.task_id)):
                if event["seq"] > read:
                    for chunk in chunks.take(event):
                        yield chunk
        for chunk in chunks.finish(last.answer):
            yield chunk
        yield stream_status(last, version)


class AnswerChunks:
    """The task's answer as it streams: each text delta of the request's own model calls becomes an artifact
    chunk, sent one delta late so that the last one can say ``lastChunk``.

    A model call's first delta restarts the artifact (``append: false``), so the artifact holds the text
    of the last model call, which is the answer; the rest are appended. When the task completes, the
    answer's text ends the artifact: the held delta, or what the deltas did not say, or (when the answer
    is not the streamed text, e.g. a structured output) the whole answer restarting it.
    """

    def __init__(self, task_id: str, context_id: str, version: Version) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.version = version
        self.sent: str | None = None  # the artifact's text as the reader has it; None before any chunk
        self.held: str | None = None
        self.held_restarts = False
        self.next_restarts = False

    def _chunk(self, text: str, *, restart: bool, last: bool) -> dict[str, Any]:
        append = not restart and self.sent is not None
        self.sent = (self.sent or "") + text if append else text
        return stream_artifact(self.task_id, self.context_id, text, self.version, append=append, last_chunk=last)

    def take(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The chunks ``event`` lets go (none for another request's events, a subagent's)."""
        if event.get("request_id", self.task_id) != self.task_id:
            return []
        if event["type"] == "model_started":
            self.held, self.next_restarts = None, True  # the text of an earlier model call is not the answer
            return []
        if event["type"] != "text_delta" or not event.get("text"):
            return []
        out = [] if self.held is None else [self._chunk(self.held, restart=self.held_restarts, last=False)]
        self.held, self.held_restarts, self.next_restarts = str(event["text"]), self.next_restarts, False
        return out

    def finish(self, answer: str | None) -> list[dict[str, Any]]:
        """The chunks that end the stream: the answer made whole (``lastChunk``), or the held delta when the
        task has no answer yet."""
        if answer is None:
            return [] if self.held is None else [self._chunk(self.held, restart=self.held_restarts, last=False)]
        if self.held is not None:
            streamed = self.held if self.held_restarts or self.sent is None else self.sent + self.held
        else:
            streamed = "" if self.next_restarts or self.sent is None else self.sent
        out: list[dict[str, Any]] = []
        if self.held is not None and answer.startswith(streamed):
            rest = answer[len(streamed) :]
            out.append(self._chunk(self.held, restart=self.held_restarts, last=not rest))
            if rest:
                out.append(self._chunk(rest, restart=False, last=True))
        elif streamed and answer.startswith(streamed) and answer != streamed:
            out.append(self._chunk(answer[len(streamed) :], restart=False, last=True))
        else:
            out.append(self._chunk(answer, restart=True, last=True))
        self.held = None
        return out


def _interrupted(task: A2ATask) -> bool:
    return task.interrupted


def _frame(body: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(body)}\n\n".encode()


async def _frames(rpc_id: object, results: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Each result as an SSE frame holding a JSON-RPC response; a failure mid-stream as an error frame."""
    try:
        async for result in results:
            yield _frame({"jsonrpc": "2.0", "id": rpc_id, "result": result})
    except RpcError as error:
        yield _frame(error.json(rpc_id))
    except StoreUnavailable as error:
        yield _frame(RpcError(INTERNAL_ERROR, f"the run store is unavailable: {error}; subscribe again").json(rpc_id))


class A2AStream(Response):
    """SSE of JSON-RPC responses; it ends with the task's interruption, when the reader leaves (the task goes
    on), or when the server stops: then with an error frame saying why, so the client subscribes again."""

    media_type = "text/event-stream"

    def __init__(self, rpc_id: object, results: AsyncIterator[dict[str, Any]], stop: StopReason) -> None:
        super().__init__(headers=SSE_HEADERS, media_type=self.media_type)
        self.raw_headers = [(name, value) for name, value in self.raw_headers if name != b"content-length"]
        self.rpc_id = rpc_id
        self.results = results
        self.stop = stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        end = await stream_frames(receive, send, _frames(self.rpc_id, self.results), self.stop)
        if end.gone:
            return
        tail = b""
        if end.reason is not None and not end.ended:
            stopped = RpcError(INTERNAL_ERROR, f"{end.reason}; the task goes on: SubscribeToTask")
            tail = _frame(stopped.json(self.rpc_id))
        with anyio.move_on_after(1), contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": tail, "more_body": False})


def a2a_routes(native: NativeService, card: CardInfo, *, bearer: bool) -> list[BaseRoute]:
    """The agent card (public) and the JSON-RPC endpoint, over the native routes' backend, body cap and stop reasons."""
    service = A2AService(native.backend, native.max_body_bytes, card, bearer=bearer, stopping=native.stopping)
    return [Route(CARD_PATH, service.card, methods=["GET"]), Route(RPC_PATH, service.rpc, methods=["POST"])]


def card_info_of(served: object) -> CardInfo:
    """The card's facts from what ``create_app`` serves: an Agent's tools and the first line of its
    system prompt (reached through an AgentClient or AgentHost); defaults for a Backend."""
    agent = getattr(getattr(served, "client", served), "agent", served)
    tools = getattr(agent, "tools", None)
    if not isinstance(tools, list):
        return CardInfo()
    prompt = getattr(agent, "system_prompt", None)
    first_line = prompt.strip().splitlines()[0] if isinstance(prompt, str) and prompt.strip() else None
    default = CardInfo()
    return CardInfo(description=first_line or default.description, skills=skills_of(tools))

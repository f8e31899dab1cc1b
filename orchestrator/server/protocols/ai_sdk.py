"""The AI SDK UI message stream at ``POST /ai-sdk/chat``: ``useChat``'s body in, UI message chunks out.

The chat is the session. A user message last starts a request; an assistant
message last answers the calls it waits on: a tool part in
``approval-responded`` answers a tool approval (``addToolApprovalResponse``),
and one in ``output-available`` answers an ``ask_user`` question with its
output (``addToolOutput``). Every answer is checked like a POSTed one before
any is taken: a bad one is a 4xx with the reason and nothing changes. The
stream ends with ``finish`` when the request completes or every call still
running waits for an answer, and with an ``error`` chunk when the request
fails. The answers' ids and the finish chunk's ``messageMetadata`` carry where
the stream stopped, so any process serving the session continues it. A client
that aborts the fetch cancels the request. See docs/protocols.md.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import Response

from orchestrator.config import ExternalEvent
from orchestrator.errors import SessionBusy
from orchestrator.messages import UserMessage
from orchestrator.runtime.handle import EventsExpired, UnknownRun
from orchestrator.server.backend import Backend, RunStart
from orchestrator.server.bodies import read_object
from orchestrator.server.errors import HTTPRefusal, bad_request
from orchestrator.server.ids import checked_id
from orchestrator.server.protocols.agui import AguiInputError, InterruptId, response_schema, schema_problem
from orchestrator.server.protocols.streaming import ProtocolStreamResponse

STREAM_HEADER = {"x-vercel-ai-ui-message-stream": "v1"}
ANSWERED_STATES = ("approval-responded", "output-available")


@attrs.frozen
class ToolAnswer:
    """An answer a tool part of the client's last assistant message carries."""

    tool_call_id: str
    approval: Mapping[str, Any] | None
    output: Any


@attrs.frozen
class ChatInput:
    """The parts of ``useChat``'s body the service reads: the chat, a new user message or the answers."""

    chat_id: str
    message: UserMessage | None
    continued_id: str | None
    cursor: Mapping[str, Any] | None
    answers: tuple[ToolAnswer, ...]


def _text(parts: list[Any]) -> str:
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text")


def chat_input(body: Mapping[str, Any]) -> ChatInput:
    """The chat request; a 400 with the reason when it is not ``useChat``'s body."""
    chat_id = checked_id(body.get("id"), "'id'")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise bad_request("'messages' must be a non-empty list of UI messages")
    last = messages[-1]
    parts = last.get("parts")
    if not isinstance(parts, list):
        raise bad_request("the last message's 'parts' must be a list")
    if last.get("role") == "user":
        text = _text(parts)
        if not text.strip():
            raise bad_request("the last user message has no text")
        return ChatInput(chat_id, UserMessage(text), None, None, ())
    if last.get("role") != "assistant":
        raise bad_request("the last message must be the user's, or the assistant's with answers to its tool calls")
    answers = []
    for part in parts:
        if not isinstance(part, dict) or not str(part.get("type", "")).startswith(("tool-", "dynamic-tool")):
            continue
        if part.get("state") not in ANSWERED_STATES or not isinstance(part.get("toolCallId"), str):
            continue
        approval = part.get("approval") if part.get("state") == "approval-responded" else None
        if approval is not None and not isinstance(approval, dict):
            raise bad_request("a tool part's 'approval' must be an object")
        answers.append(ToolAnswer(part["toolCallId"], approval, part.get("output")))
    metadata = last.get("metadata")
    cursor = metadata.get("orchestrator") if isinstance(metadata, dict) else None
    continued = last.get("id")
    return ChatInput(
        chat_id,
        None,
        continued if isinstance(continued, str) else None,
        cursor if isinstance(cursor, dict) else None,
        tuple(answers),
    )


def chunk(data: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


DONE = b"data: [DONE]\n\n"


class ChatRun:
    """One chat request: takes the input, then yields the UI message chunks of its request."""

    def __init__(self, backend: Backend, given: ChatInput) -> None:
        self.backend = backend
        self.given = given
        self.request_id: str | None = None
        self.ended = False
        self.declined: set[str] = set()

    async def prepare(self) -> tuple[str, int, str]:
        """Start or continue the request: (request id, where to read on, the message id); HTTPRefusal when not."""
        session_id = self.given.chat_id
        if self.given.message is not None:
            try:
                request_id = await self.backend.start(RunStart(session_id, self.given.message))
            except SessionBusy as busy:
                raise HTTPRefusal(409, "SessionBusy", f"{busy}; answer its waiting tool calls first") from None
            return request_id, 0, f"{request_id}.a"
        if not self.given.answers:
            raise bad_request("the last assistant message answers none of its tool calls")
        try:
            return await self._answer(session_id)
        except AguiInputError as refused:
            status = 404 if refused.code == "UnknownInterrupt" else 422
            raise HTTPRefusal(status, refused.code, refused.message) from None

    async def _answer(self, session_id: str) -> tuple[str, int, str]:
        waiting = {str(call["tool_call_id"]): call for call in await self.backend.pending(session_id)}
        cursor = self.given.cursor or {}
        taken: list[tuple[Mapping[str, Any], ExternalEvent]] = []
        given_seq = cursor.get("seq")
        seq = given_seq if isinstance(given_seq, int) and given_seq >= 0 else 0
        for answer in self.given.answers:
            waiting_call = waiting.get(answer.tool_call_id)
            if answer.approval is not None:
                pointer = InterruptId.decode(answer.approval.get("id"))
                if pointer.session_id != session_id or pointer.tool_call_id != answer.tool_call_id:
                    raise AguiInputError("UnknownInterrupt", "the approval belongs to another chat or tool call")
                seq = max(seq, pointer.seq)
                approved = answer.approval.get("approved")
                if not isinstance(approved, bool):
                    raise AguiInputError("AnswerRefused", "'approval.approved' must be a bool")
                payload: dict[str, Any] = {"approved": approved}
                reason = answer.approval.get("reason")
                if isinstance(reason, str):
                    payload["reason"] = reason
                if not approved:
                    self.declined.add(answer.tool_call_id)
            else:
                payload = {"answer": answer.output}
            if waiting_call is None:
                continue  # answered before: the client sends its history again
            payload["tool_call_id"] = answer.tool_call_id
            taken.append((waiting_call, ExternalEvent(str(waiting_call["response_event"]), payload)))
        if not taken:
            raise AguiInputError("UnknownInterrupt", "none of the answered tool calls waits for an answer")
        requests = {str(call["request_id"]) for call, _ in taken}
        if len(requests) > 1:
            raise AguiInputError("AnswerRefused", "the answers are for tool calls of different requests")
        for call, event in taken:
            schema = response_schema(str(call["event"]), call["payload"])
            problem = schema_problem(schema, event.payload)
            if problem is not None:
                raise AguiInputError("AnswerRefused", f"{call['tool_call_id']}: {problem}")
        request_id = requests.pop()
        for _, event in taken:
            delivery = await self.backend.deliver(session_id, request_id, event, None)
            if not delivery.accepted:
                reasons = "; ".join(str(why) for why in delivery.refused.values()) or "the answer was not taken"
                raise AguiInputError("AnswerRefused", reasons)
        return request_id, seq, self.given.continued_id or f"{request_id}.a"

    async def chunks(self, request_id: str, after: int, message_id: str) -> AsyncIterator[bytes]:
        self.request_id = request_id
        mapper = ChunkMapper(request_id, self.declined)
        yield chunk({"type": "start", "messageId": message_id})
        try:
            batches = await self.backend.events(request_id, 0)
        except (UnknownRun, EventsExpired) as gone:
            self.ended = True
            yield chunk({"type": "error", "errorText": f"{type(gone).__name__}: {gone}"})
            yield DONE
            return
        seq = after
        async for batch in batches:
            out: list[dict[str, Any]] = []
            for event in batch:
                if event["seq"] <= after:
                    continue
                seq = event["seq"]
                kind = event["type"]
                if kind == "run_completed":
                    self.ended = True
                    for item in [*out, *mapper.close(), {"type": "finish", "finishReason": "stop"}]:
                        yield chunk(item)
                    yield DONE
                    return
                if kind in ("run_failed", "run_cancelled"):
                    self.ended = True
                    error = event.get("error") or {"type": "RunCancelled", "message": "the run was cancelled"}
                    out += [*mapper.close(), {"type": "error", "errorText": f"{error['type']}: {error['message']}"}]
                    for item in out:
                        yield chunk(item)
                    yield DONE
                    return
                out += mapper.map(event, seq)
            for item in out:
                yield chunk(item)
            if mapper.waiting and await self._waits(request_id):
                self.ended = True
                metadata = {"orchestrator": {"requestId": request_id, "seq": seq}}
                for item in [
                    *mapper.close(),
                    {"type": "finish", "finishReason": "tool-calls", "messageMetadata": metadata},
                ]:
                    yield chunk(item)
                yield DONE
                return
            mapper.waiting = False
        self.ended = True
        yield chunk({"type": "error", "errorText": "StreamEnded: the request's events ended before its terminal event"})
        yield DONE

    async def _waits(self, request_id: str) -> bool:
        return any(call["request_id"] == request_id for call in await self.backend.pending(self.given.chat_id))


class ChunkMapper:
    """Our events of one request as UI message chunks; it tracks the open text and reasoning parts."""

    def __init__(self, request_id: str, declined: set[str]) -> None:
        self.request_id = request_id
        self.iteration = 0
        self.text_open: str | None = None
        self.reasoning_open: str | None = None
        self.declined = declined
        self.waiting = False
        self.step_open = False

    def close(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.reasoning_open is not None:
            out.append({"type": "reasoning-end", "id": self.reasoning_open})
            self.reasoning_open = None
        if self.text_open is not None:
            out.append({"type": "text-end", "id": self.text_open})
            self.text_open = None
        if self.step_open:
            out.append({"type": "finish-step"})
            self.step_open = False
        return out

    def map(self, event: Mapping[str, Any], seq: int) -> list[dict[str, Any]]:
        kind = event["type"]
        if kind == "model_started":
            self.iteration = int(event.get("iteration", self.iteration + 1))
            out = self.close()
            self.step_open = True
            return [*out, {"type": "start-step"}]
        if kind in ("text_delta", "reasoning_delta"):
            if not event["text"]:
                return []
            out = []
            if not self.step_open:
                self.step_open = True
                out.append({"type": "start-step"})
            if kind == "text_delta":
                if self.text_open is None:
                    self.text_open = f"{self.request_id}.t{self.iteration}"
                    out.append({"type": "text-start", "id": self.text_open})
                return [*out, {"type": "text-delta", "id": self.text_open, "delta": event["text"]}]
            if self.reasoning_open is None:
                self.reasoning_open = f"{self.request_id}.r{self.iteration}"
                out.append({"type": "reasoning-start", "id": self.reasoning_open})
            return [*out, {"type": "reasoning-delta", "id": self.reasoning_open, "delta": event["text"]}]
        if kind == "model_completed":
            out = []
            if self.reasoning_open is not None:
                out.append({"type": "reasoning-end", "id": self.reasoning_open})
                self.reasoning_open = None
            if self.text_open is not None:
                out.append({"type": "text-end", "id": self.text_open})
                self.text_open = None
            for call in event["message"].get("tool_calls") or []:
                arguments = call.get("arguments", {})
                out += [
                    {"type": "tool-input-start", "toolCallId": call["id"], "toolName": call["name"], "dynamic": True},
                    {"type": "tool-input-delta", "toolCallId": call["id"], "inputTextDelta": json.dumps(arguments)},
                    {
                        "type": "tool-input-available",
                        "toolCallId": call["id"],
                        "toolName": call["name"],
                        "input": arguments,
                        "dynamic": True,
                    },
                ]
            return out
        if kind == "tool_completed":
            return [
                {
                    "type": "tool-output-available",
                    "toolCallId": event["call"]["id"],
                    "output": event["result"]["content"],
                    "dynamic": True,
                }
            ]
        if kind in ("tool_failed", "tool_skipped", "tool_cancelled"):
            call_id = event["call"]["id"]
            if call_id in self.declined:
                return [{"type": "tool-output-denied", "toolCallId": call_id}]
            content = event["result"]["content"]
            text = content if isinstance(content, str) else json.dumps(content)
            return [
                {"type": "tool-output-error", "toolCallId": call_id, "errorText": f"{kind}: {text}", "dynamic": True}
            ]
        if "response_event" in event and "tool_call_id" in event:
            self.waiting = True
            if kind == "ask_user":
                return []  # the client supplies the tool part's output
            pointer = InterruptId(
                str(event["session_id"]), self.request_id, str(event["tool_call_id"]), str(event["response_event"]), seq
            )
            return [
                {"type": "tool-approval-request", "approvalId": pointer.encode(), "toolCallId": event["tool_call_id"]}
            ]
        return []


async def _abort(run: ChatRun) -> None:
    """The client aborted the fetch mid-stream: the request is cancelled."""
    if run.ended or run.request_id is None:
        return
    with contextlib.suppress(UnknownRun):
        await run.backend.cancel(run.request_id)


def _failed(error: Exception) -> bytes:
    return chunk({"type": "error", "errorText": f"{type(error).__name__}: {error}"}) + DONE


async def chat_route(backend: Backend, max_body_bytes: int, request: Request) -> Response:
    """``POST /ai-sdk/chat``: a 4xx with the reason when the input cannot be taken, else the UI message stream."""
    body = await read_object(request, max_body_bytes)
    run = ChatRun(backend, chat_input(body))
    request_id, after, message_id = await run.prepare()
    return ProtocolStreamResponse(
        run.chunks(request_id, after, message_id), _failed, lambda: _abort(run), STREAM_HEADER
    )

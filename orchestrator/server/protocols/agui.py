"""AG-UI 1.0 at ``POST /ag-ui``: a ``RunAgentInput`` in, an SSE stream of AG-UI events out.

The thread is the session. A run starts a request of the session, resumes the
request whose calls wait (its ``resume[]`` answers them, each checked like a
POSTed answer), or steers the session's active request when ``parentRunId``
names it. A run ends with ``RUN_FINISHED`` when its request completes, with
``RUN_FINISHED {outcome: interrupt}`` when every call still running waits for
an answer, and with ``RUN_ERROR`` (the error's type as ``code``) when the
request fails or the input cannot be taken, in which case nothing changed.
An interrupt's id carries all the next run needs to find its call, so any
process serving the session can take the answer. A client that disconnects
cancels the request: AG-UI has no other cancel. Each run is an
``machines.agui_run.AGUI_RUN`` machine. See docs/protocols.md for the mapping.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import Response

from machines.agui_run import AGUI_RUN
from machines.build import BoundMachine
from orchestrator.config import AgentRunConfig, ExternalEvent, MetadataError
from orchestrator.errors import SessionBusy
from orchestrator.extensions.client_tools import CALL_EVENT, ClientTool, client_tools_metadata
from orchestrator.messages import UserMessage
from orchestrator.runtime.handle import EventsExpired, UnknownRun
from orchestrator.server.backend import Backend, RunExists, RunStart
from orchestrator.server.bodies import read_object
from orchestrator.server.errors import bad_request
from orchestrator.server.identity import SessionNotFound
from orchestrator.server.ids import checked_id
from orchestrator.server.protocols.streaming import ProtocolStreamResponse

logger = logging.getLogger(__name__)

CUSTOM_PREFIX = "orchestrator."
"""The namespace of the CUSTOM events that carry our events with no AG-UI counterpart."""

STEERING_EVENT = "steering_message"
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["approved"],
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": ["string", "null"]}},
}
"""The answer of a call that waits for a yes or no (tool approval, Plan Mode entry and exit)."""
CLIENT_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["content"],
    "properties": {"content": {"type": "string"}, "error": {"type": "boolean"}},
}
"""The answer of a call of a frontend tool: its result, failed when ``error``."""


class AguiInputError(Exception):
    """A run that cannot be taken: refused with RUN_ERROR ``code`` and the reason, and nothing changed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@attrs.frozen
class InterruptId:
    """What an interrupt's id carries: the call that waits, and where its AG-UI run stopped reading.

    A call of one of the run's subagents also names the child's session and request (``call_session_id``,
    ``call_request_id``); for the run's own calls they are empty.
    """

    session_id: str
    request_id: str
    tool_call_id: str
    response_event: str
    seq: int
    call_session_id: str = ""
    call_request_id: str = ""

    @property
    def target(self) -> tuple[str, str]:
        """The session and request of the waiting call."""
        return self.call_session_id or self.session_id, self.call_request_id or self.request_id

    def encode(self) -> str:
        data: list[object] = [self.session_id, self.request_id, self.tool_call_id, self.response_event, self.seq]
        if self.call_request_id:
            data += [self.call_session_id, self.call_request_id]
        return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: object) -> InterruptId:
        """The id's fields; AguiInputError UnknownInterrupt when ``text`` is not an id this service gave."""
        if not isinstance(text, str) or not text or len(text) > 2000:
            raise AguiInputError("UnknownInterrupt", "an interruptId must be a string this service gave")
        try:
            data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            session_id, request_id, tool_call_id, response_event, seq, *call = data
        except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
            raise AguiInputError("UnknownInterrupt", f"{text[:80]!r} is not an interrupt id of this service") from None
        strings = (session_id, request_id, tool_call_id, response_event, *call)
        if (
            not all(isinstance(v, str) for v in strings)
            or len(call) not in (0, 2)
            or not (isinstance(seq, int) and seq >= 0)
        ):
            raise AguiInputError("UnknownInterrupt", f"{text[:80]!r} is not an interrupt id of this service")
        return cls(session_id, request_id, tool_call_id, response_event, seq, *call)


@attrs.frozen
class Answer:
    """One ``resume[]`` entry: the interrupt it answers, whether it is cancelled, and its payload."""

    interrupt: InterruptId
    cancelled: bool
    payload: Mapping[str, Any]


@attrs.frozen
class RunInput:
    """The parts of a ``RunAgentInput`` the service reads."""

    thread_id: str
    run_id: str
    parent_run_id: str | None
    message: UserMessage | None
    resume: tuple[Mapping[str, Any], ...]
    tools: tuple[ClientTool, ...] = ()


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    raise bad_request("a message's 'content' must be a string or a list of content parts")


def run_input(body: Mapping[str, Any]) -> RunInput:
    """The run's input; a 400 with the reason when it is no ``RunAgentInput``."""
    thread_id = checked_id(body.get("threadId"), "'threadId'")
    run_id = checked_id(body.get("runId"), "'runId'")
    parent = body.get("parentRunId")
    parent_run_id = None if parent is None else checked_id(parent, "'parentRunId'")
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise bad_request("'messages' must be a list of message objects")
    resume = body.get("resume") or []
    if not isinstance(resume, list) or not all(isinstance(entry, dict) for entry in resume):
        raise bad_request("'resume' must be a list of objects")
    message = None
    users = [m for m in messages if m.get("role") == "user"]
    if users:
        text = _text_of(users[-1].get("content"))
        message = UserMessage(text) if text.strip() else None
    return RunInput(thread_id, run_id, parent_run_id, message, tuple(resume), _client_tools(body.get("tools")))


def _client_tools(value: object) -> tuple[ClientTool, ...]:
    """``RunAgentInput.tools``: the frontend tools; a 400 when one is not ``{name, description, parameters}``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad_request("'tools' must be a list of tools")
    found = []
    for index, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise bad_request(f"'tools[{index}]' must be an object")
        name = checked_id(tool.get("name"), f"'tools[{index}].name'")
        description = tool.get("description", "")
        parameters = tool.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(description, str) or not isinstance(parameters, dict):
            raise bad_request(f"'tools[{index}]' needs a string description and an object of parameters")
        found.append(ClientTool(name, description, parameters))
    try:  # they are kept with the run as its metadata, whose size is bounded
        AgentRunConfig(metadata=client_tools_metadata(found))
    except MetadataError as error:
        raise bad_request(f"'tools' cannot be kept with the run: {error}") from None
    return tuple(found)


def response_schema(event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema of the answer a waiting call takes (the ``payload`` of its ``resume`` entry)."""
    if event == "ask_user":
        options = payload.get("options") or []
        answer: dict[str, Any] = {"type": "string"}
        if options:
            answer["enum"] = list(options)
        return {"type": "object", "required": ["answer"], "properties": {"answer": answer}}
    if event in ("tool_approval", "enter_plan_mode", "exit_plan_mode"):
        return APPROVAL_SCHEMA
    if event == CALL_EVENT:
        return CLIENT_TOOL_SCHEMA
    return {"type": "object"}


def schema_problem(schema: Mapping[str, Any], payload: Mapping[str, Any]) -> str | None:
    """Why ``payload`` does not fit the answer ``schema`` (the shapes ``response_schema`` gives), else None."""
    for name, rule in schema.get("properties", {}).items():
        if name not in payload:
            if name in schema.get("required", ()):
                return f"missing {name!r}"
            continue
        value = payload[name]
        kinds = rule.get("type")
        allowed = kinds if isinstance(kinds, list) else [kinds]
        python = {"string": str, "boolean": bool, "null": type(None)}
        if not any(isinstance(value, python[kind]) for kind in allowed if kind in python):
            return f"{name!r} must be {' or '.join(allowed)}"
        if "enum" in rule and value not in rule["enum"]:
            return f"{name!r} must be one of {rule['enum']}"
    return None


def _question(event: str, payload: Mapping[str, Any]) -> str:
    if event == "ask_user":
        return str(payload.get("question", ""))
    if event == "tool_approval":
        arguments = json.dumps(payload.get("arguments", {}), ensure_ascii=False)
        return f"Run {payload.get('name', 'the tool')} with {arguments}?"
    if event == CALL_EVENT:
        arguments = json.dumps(payload.get("arguments", {}), ensure_ascii=False)
        return f"Run the client's tool {payload.get('tool_name', '')} with {arguments}"
    if event == "enter_plan_mode":
        return f"Enter Plan Mode? {payload.get('reason', '')}".strip()
    if event == "exit_plan_mode":
        return f"Approve this plan?\n{payload.get('plan', '')}".strip()
    return f"{event}: answer with {payload.get('response_event', 'a response')}"


def _takes_approval(call: Mapping[str, Any]) -> bool:
    return response_schema(str(call["event"]), call["payload"]) is APPROVAL_SCHEMA


def _message_json(message: Mapping[str, Any], message_id: str) -> dict[str, Any] | None:
    """Our wire message as an AG-UI message with ``message_id``; None for a role AG-UI does not hold."""
    role = message.get("role")
    content = message.get("content")
    text = content if isinstance(content, str) else _parts_text(content)
    if role == "user":
        return {"id": message_id, "role": "user", "content": text}
    if role == "assistant":
        found: dict[str, Any] = {"id": message_id, "role": "assistant", "content": text}
        calls = message.get("tool_calls") or []
        if calls:
            found["toolCalls"] = [_tool_call_json(call) for call in calls]
        return found
    if role == "tool":
        return {"id": message_id, "role": "tool", "toolCallId": message.get("tool_call_id"), "content": text}
    return None


def _parts_text(content: object) -> str:
    if not isinstance(content, list):
        return ""
    return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")


def _tool_call_json(call: Mapping[str, Any]) -> dict[str, Any]:
    arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
    return {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": arguments}}


class Mapper:
    """Our events of one request, in order, as AG-UI events; it tracks the open text and reasoning messages.

    The request's subagents' events (forwarded on its stream under their own request ids) go to a
    Mapper of each child, whose AG-UI events and messages carry the child's request id as ``subagentRunId``;
    a child keeps its messages in its parent's list, in the order they came.
    """

    def __init__(
        self, request_id: str, subagent_run_id: str | None = None, messages: list[dict[str, Any]] | None = None
    ) -> None:
        self.request_id = request_id
        self.subagent_run_id = subagent_run_id
        self.iteration = 0
        self.text_open: str | None = None
        self.reasoning_open: str | None = None
        self.messages: list[dict[str, Any]] = [] if messages is None else messages
        self.waiting = False
        self.subagents: dict[str, Mapper] = {}  # the open subagents at every depth, by request id, oldest first
        self.announced: dict[str, dict[str, Any]] = {}  # each open subagent's SUBAGENT_STARTED

    def _assistant_id(self) -> str:
        return f"{self.request_id}.a{self.iteration}"

    def _attributed(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.subagent_run_id is not None:
            for event in events:
                event["subagentRunId"] = self.subagent_run_id
        return events

    def close(self) -> list[dict[str, Any]]:
        """Events that end the open text and reasoning messages."""
        out: list[dict[str, Any]] = []
        if self.reasoning_open is not None:
            out += [
                {"type": "REASONING_MESSAGE_END", "messageId": self.reasoning_open},
                {"type": "REASONING_END", "messageId": self.reasoning_open},
            ]
            self.reasoning_open = None
        if self.text_open is not None:
            out.append({"type": "TEXT_MESSAGE_END", "messageId": self.text_open})
            self.text_open = None
        return self._attributed(out)

    def _route(self, event: Mapping[str, Any]) -> tuple[Mapper, list[dict[str, Any]]]:
        """The Mapper whose request ``event`` is of, and the subagent events its start or end makes."""
        kind = event["type"]
        if kind == "subagent_started":
            child_id = str(event["child_request_id"])
            started: dict[str, Any] = {
                "type": "SUBAGENT_STARTED",
                "subagentRunId": child_id,
                "name": str(event["agent"]),
                "parentToolCallId": str(event["tool_call_id"]),
                "metadata": {"orchestrator": {"childSessionId": event["child_session_id"], "depth": event["depth"]}},
            }
            if event.get("request_id") in self.subagents:
                started["parentSubagentRunId"] = str(event["request_id"])
            self.subagents[child_id] = Mapper(child_id, child_id, self.messages)
            self.announced[child_id] = started
            return self, [dict(started)]
        if kind == "subagent_completed":
            child_id = str(event["child_request_id"])
            child = self.subagents.pop(child_id, None)
            self.announced.pop(child_id, None)
            if child is None:
                return self, []
            out = child.close()
            if event["outcome"] == "completed":
                finished = {"type": "SUBAGENT_FINISHED", "subagentRunId": child_id, "outcome": {"type": "success"}}
                out.append({**finished, "result": event.get("result", "")})
            else:
                code = "SubagentCancelled" if event["outcome"] == "cancelled" else "SubagentFailed"
                message = str(event.get("result") or f"the subagent's request was {event['outcome']}")
                out.append({"type": "SUBAGENT_ERROR", "subagentRunId": child_id, "message": message, "code": code})
            return self, out
        return self.subagents.get(str(event.get("request_id")), self), []

    def remember(self, event: Mapping[str, Any]) -> None:
        """Keep the messages and subagents ``event`` says the request holds (for a later run's snapshot)."""
        owner, _ = self._route(event)
        owner._remember(event)

    def _remember(self, event: Mapping[str, Any]) -> None:
        kind = event["type"]
        if kind == "run_started":
            found = _message_json(event["input"], f"{self.request_id}.u")
        elif kind == "model_started":
            self.iteration = int(event.get("iteration", self.iteration + 1))
            return
        elif kind == "model_completed":
            found = _message_json(event["message"], self._assistant_id())
        elif kind in ("tool_completed", "tool_failed", "tool_skipped", "tool_cancelled"):
            found = _message_json(event["result"], f"{self.request_id}.t.{event['call']['id']}")
        else:
            return
        if found is not None:
            if self.subagent_run_id is not None:
                found["subagentRunId"] = self.subagent_run_id
            self.messages.append(found)

    def map(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The AG-UI events of one of ours (the request's own terminal events are the run's to map)."""
        owner, made = self._route(event)
        if made:
            return made
        owner._remember(event)
        if "response_event" in event and "tool_call_id" in event:
            self.waiting = True
        return owner._attributed(owner._map(event))

    def resumed(self) -> list[dict[str, Any]]:
        """A later run goes on with the subagents still open: each is announced again, parents first."""
        return [dict(started) for started in self.announced.values()]

    def suspended(self, interrupts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The run stops for answers: each open subagent ends its segment suspended, innermost first."""
        out: list[dict[str, Any]] = []
        for child_id, child in reversed(self.subagents.items()):
            own = [i["id"] for i in interrupts if i.get("subagentRunId") == child_id]
            out += child.close()
            outcome = {"type": "suspended", "interruptIds": own}
            out.append({"type": "SUBAGENT_FINISHED", "subagentRunId": child_id, "outcome": outcome})
        return out

    def _map(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind = event["type"]
        if kind == "transition":
            if event.get("machine") == "request" and self.subagent_run_id is None:
                op = {"op": "add", "path": f"/regions/{event['region']}", "value": event["dest"]}
                return [{"type": "STATE_DELTA", "delta": [op]}]
            return [_custom(event)]
        if kind == "text_delta":
            if not event["text"]:
                return []
            out = []
            if self.reasoning_open is not None:
                out += self.close()
            if self.text_open is None:
                self.text_open = self._assistant_id()
                out.append({"type": "TEXT_MESSAGE_START", "messageId": self.text_open, "role": "assistant"})
            return [*out, {"type": "TEXT_MESSAGE_CONTENT", "messageId": self.text_open, "delta": event["text"]}]
        if kind == "reasoning_delta":
            if not event["text"]:
                return []
            out = []
            if self.reasoning_open is None:
                self.reasoning_open = f"{self._assistant_id()}.r"
                out += [
                    {"type": "REASONING_START", "messageId": self.reasoning_open},
                    {"type": "REASONING_MESSAGE_START", "messageId": self.reasoning_open, "role": "reasoning"},
                ]
            return [
                *out,
                {"type": "REASONING_MESSAGE_CONTENT", "messageId": self.reasoning_open, "delta": event["text"]},
            ]
        if kind == "model_completed":
            out = self.close()
            for call in event["message"].get("tool_calls") or []:
                arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
                out += [
                    {
                        "type": "TOOL_CALL_START",
                        "toolCallId": call["id"],
                        "toolCallName": call["name"],
                        "parentMessageId": self._assistant_id(),
                    },
                    {"type": "TOOL_CALL_ARGS", "toolCallId": call["id"], "delta": arguments},
                    {"type": "TOOL_CALL_END", "toolCallId": call["id"]},
                ]
            return [*out, _custom(event)]
        if kind in ("tool_completed", "tool_failed", "tool_skipped", "tool_cancelled"):
            result = event["result"]
            status = str(result.get("status", kind.removeprefix("tool_")))
            return [
                {
                    "type": "TOOL_CALL_RESULT",
                    "messageId": f"{self.request_id}.t.{event['call']['id']}",
                    "toolCallId": event["call"]["id"],
                    "content": result["content"]
                    if isinstance(result["content"], str)
                    else _parts_text(result["content"]),
                    "role": "tool",
                    "metadata": {"orchestrator": {"status": status, "event": kind}},
                }
            ]
        return [_custom(event)]


def _custom(event: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "CUSTOM", "name": f"{CUSTOM_PREFIX}{event['type']}", "value": dict(event)}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"type": "RUN_ERROR", "message": message, "code": code}


class AguiRun:
    """One AG-UI run: decides what the input asks, then yields the AG-UI events of its request."""

    def __init__(self, backend: Backend, given: RunInput) -> None:
        self.backend = backend
        self.given = given
        self.machine = BoundMachine(AGUI_RUN, {})
        self.request_id: str | None = None

    @property
    def state(self) -> str:
        return self.machine.state()

    def _started(self) -> dict[str, Any]:
        started: dict[str, Any] = {"type": "RUN_STARTED", "threadId": self.given.thread_id, "runId": self.given.run_id}
        if self.given.parent_run_id is not None:
            started["parentRunId"] = self.given.parent_run_id
        return started

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        yield self._started()
        try:
            if self.given.resume:
                request_id, after = await self._resume()
            else:
                steered = await self._steer_or_start()
                if steered is None:
                    self.machine.fire("steer")
                    yield self._finished({"type": "success"})
                    return
                request_id, after = steered, 0
        except AguiInputError as refused:
            self.machine.fire("refuse")
            yield _error(refused.code, refused.message)
            return
        self.request_id = request_id
        async for event in self._stream(request_id, after, resumed=bool(self.given.resume)):
            yield event

    def _finished(self, outcome: dict[str, Any], result: Any = None) -> dict[str, Any]:
        finished: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": self.given.thread_id}
        finished["runId"] = self.given.run_id
        finished["outcome"] = outcome
        if result is not None:
            finished["result"] = result
        return finished

    async def _steer_or_start(self) -> str | None:
        """Start a request and give its id; or steer the active one (None); AguiInputError when neither."""
        session_id = self.given.thread_id
        if self.given.message is None:
            raise AguiInputError("BadRequest", "the run has no user message to answer and nothing to resume")
        active = await self._active_request(session_id)
        if active is not None and self.given.parent_run_id is not None:
            if self.given.parent_run_id != active:
                raise AguiInputError(
                    "SessionBusy",
                    f"parentRunId {self.given.parent_run_id!r} is not the session's active run {active!r}",
                )
            delivery = await self.backend.deliver(
                session_id, active, ExternalEvent(STEERING_EVENT, {"content": self.given.message.text}), None
            )
            if not delivery.accepted:
                reasons = "; ".join(f"{name}: {why}" for name, why in delivery.refused.items())
                raise AguiInputError("SteeringRefused", reasons or "nothing takes steering in this agent")
            return None
        metadata = client_tools_metadata(self.given.tools) if self.given.tools else None
        try:
            request_id = await self.backend.start(
                RunStart(session_id, self.given.message, request_id=self.given.run_id, metadata=metadata)
            )
        except SessionBusy as busy:
            raise AguiInputError(
                "SessionBusy", f"{busy}; answer its interrupts, or name the active run as parentRunId to steer it"
            ) from None
        except RunExists as exists:
            raise AguiInputError("RunExists", str(exists)) from None
        except SessionNotFound as unknown:  # another principal's thread
            raise AguiInputError("NotFound", str(unknown)) from None
        self.machine.fire("start")
        return request_id

    async def _active_request(self, session_id: str) -> str | None:
        found = await self.backend.session(session_id)
        if found is not None and found.get("request_id"):
            return str(found["request_id"])
        for call in await self.backend.pending(session_id):
            if call.get("live", True):
                return str(call["request_id"])
        return None

    async def _resume(self) -> tuple[str, int]:
        """Take every answer once each names a waiting call of this thread; the request and where to read on."""
        session_id = self.given.thread_id
        answers: list[Answer] = []
        for entry in self.given.resume:
            interrupt = InterruptId.decode(entry.get("interruptId"))
            status = entry.get("status")
            if status not in ("resolved", "cancelled"):
                raise AguiInputError(
                    "BadResume", f"a resume entry's status must be resolved or cancelled, not {status!r}"
                )
            payload = entry.get("payload")
            if payload is None:
                payload = {}
            if not isinstance(payload, dict):
                raise AguiInputError(
                    "BadAnswer", f"an answer's payload must be an object, not {type(payload).__name__}"
                )
            if interrupt.session_id != session_id:
                raise AguiInputError("UnknownInterrupt", "the interrupt belongs to another thread")
            answers.append(Answer(interrupt, status == "cancelled", payload))
        if not answers:
            raise AguiInputError("BadResume", "'resume' is empty")
        requests = {answer.interrupt.request_id for answer in answers}
        if len(requests) > 1:
            raise AguiInputError("BadResume", "the answers are for interrupts of different runs")
        # parked calls too (a web node's waits), and the waiting calls of the run's subagents (their own sessions)
        calls = await self.backend.pending(session_id)
        waiting = {_call_key(call["session_id"], call["request_id"], call): call for call in calls}
        for answer in answers:
            if _answer_key(answer) not in waiting:
                raise AguiInputError(
                    "UnknownInterrupt", f"no call {answer.interrupt.tool_call_id!r} of this thread waits for an answer"
                )
        request_id = answers[0].interrupt.request_id
        open_ids = {
            (s, r, c) for (s, r, c, _) in waiting if (s == session_id and r == request_id) or s != session_id
        }
        answered = {(*a.interrupt.target, a.interrupt.tool_call_id) for a in answers}
        if open_ids - answered:
            missing = ", ".join(sorted(c for _, _, c in open_ids - answered))
            raise AguiInputError("BadResume", f"every open interrupt must be answered; unanswered: {missing}")
        for answer in answers:  # every answer is checked before any is taken: a bad one changes nothing
            call = waiting[_answer_key(answer)]
            problem = (
                None
                if answer.cancelled
                else schema_problem(response_schema(str(call["event"]), call["payload"]), answer.payload)
            )
            if problem is not None:
                raise AguiInputError("AnswerRefused", f"{answer.interrupt.tool_call_id}: {problem}")
        cancel_request = False
        for answer in answers:
            call = waiting[_answer_key(answer)]
            if answer.cancelled and call["event"] == CALL_EVENT:
                given: dict[str, Any] = {"content": "the client declined to run the tool", "error": True}
            elif answer.cancelled and not _takes_approval(call):
                cancel_request = True
                continue
            else:
                given = {"approved": False, "reason": "declined"} if answer.cancelled else dict(answer.payload)
            given["tool_call_id"] = answer.interrupt.tool_call_id
            event = ExternalEvent(answer.interrupt.response_event, given)
            delivery = await self.backend.deliver(*answer.interrupt.target, event, None)
            if not delivery.accepted:
                reasons = "; ".join(f"{why}" for why in delivery.refused.values()) or "the answer was not taken"
                raise AguiInputError("AnswerRefused", reasons)
        if cancel_request:
            await self.backend.cancel(request_id)
        self.machine.fire("resume")
        return request_id, max(answer.interrupt.seq for answer in answers)

    async def _stream(self, request_id: str, after: int, *, resumed: bool) -> AsyncIterator[dict[str, Any]]:
        mapper = Mapper(request_id)
        try:
            view = await self.backend.run(request_id)
            batches = await self.backend.events(request_id, 0)
        except (UnknownRun, EventsExpired) as gone:
            self.machine.fire("fail")
            yield _error(type(gone).__name__, str(gone))
            return
        if not resumed:
            yield {"type": "STATE_SNAPSHOT", "snapshot": {"requestId": request_id, "regions": view.states or {}}}
        snapshot_sent = not resumed
        seq = after
        async for batch in batches:
            out: list[dict[str, Any]] = []
            for event in batch:
                if event["seq"] <= after:
                    mapper.remember(event)
                    continue
                if not snapshot_sent:
                    snapshot_sent = True
                    messages = await self._thread_messages(request_id, mapper.messages)
                    out.append({"type": "MESSAGES_SNAPSHOT", "messages": messages})
                    out.append(
                        {"type": "STATE_SNAPSHOT", "snapshot": {"requestId": request_id, "regions": view.states or {}}}
                    )
                    out += mapper.resumed()
                seq = event["seq"]
                kind = event["type"] if event.get("request_id", request_id) == request_id else "subagent's"
                if kind == "run_completed":
                    self.machine.fire("finish")
                    yield_all = [*out, *mapper.close(), self._finished({"type": "success"}, _result(event))]
                    for item in yield_all:
                        yield item
                    return
                if kind in ("run_failed", "run_cancelled"):
                    self.machine.fire("fail")
                    error = event.get("error") or {"type": "RunCancelled", "message": "the run was cancelled"}
                    for item in [*out, *mapper.close(), _error(str(error["type"]), str(error["message"]))]:
                        yield item
                    return
                out += mapper.map(event)
            for item in out:
                yield item
            if mapper.waiting:
                interrupts = await self._interrupts(request_id, seq, mapper.subagents)
                if interrupts:
                    self.machine.fire("interrupt")
                    outcome = {"type": "interrupt", "interrupts": interrupts}
                    for item in [*mapper.suspended(interrupts), *mapper.close(), self._finished(outcome)]:
                        yield item
                    return
                mapper.waiting = False
        self.machine.fire("fail")
        yield _error("StreamEnded", "the request's events ended before its terminal event")

    async def _thread_messages(self, request_id: str, current: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every message of the thread: its history, each message with the id the run that streamed it gave.

        The ids come from the logs of the thread's finished requests and of ``request_id`` (``current``, its
        messages so far with its subagents'); a message no kept log holds (a log expired, a compaction's
        summary) is ``<thread>.h<position in the history>``.
        """
        thread = self.given.thread_id
        logged: list[dict[str, Any]] = []
        for earlier in await self.backend.requests(thread):
            if earlier != request_id:
                logged += await self._logged_messages(earlier)
        logged += [message for message in current if "subagentRunId" not in message]
        found = await self.backend.session(thread)
        history = found.get("messages") if found is not None else None
        merged = logged if not isinstance(history, list) else _aligned(history, logged, thread)
        return _with_subagents(merged, current)

    async def _logged_messages(self, request_id: str) -> list[dict[str, Any]]:
        """The messages a finished request's log holds, with their ids; none when its log is gone."""
        mapper = Mapper(request_id)
        try:
            if not (await self.backend.run(request_id)).done:
                return []
            async for batch in await self.backend.events(request_id, 0):
                for event in batch:
                    mapper.remember(event)
        except (UnknownRun, EventsExpired):
            return []
        return [message for message in mapper.messages if "subagentRunId" not in message]

    async def _interrupts(self, request_id: str, seq: int, subagents: Mapping[str, Mapper]) -> list[dict[str, Any]]:
        """The waiting calls of the request and of its open subagents (each attributed to its subagent)."""
        found = []
        for call in await self.backend.pending(self.given.thread_id):
            child = call["request_id"] in subagents
            if call["request_id"] != request_id and not child:
                continue
            interrupt = InterruptId(
                self.given.thread_id,
                request_id,
                str(call["tool_call_id"]),
                str(call["response_event"]),
                seq,
                str(call["session_id"]) if child else "",
                str(call["request_id"]) if child else "",
            )
            payload = call["payload"]
            attribution = {"subagentRunId": str(call["request_id"])} if child else {}
            found.append(
                {
                    **attribution,
                    "id": interrupt.encode(),
                    "reason": str(call["event"]),
                    "message": _question(str(call["event"]), payload),
                    "toolCallId": call["tool_call_id"],
                    "responseSchema": response_schema(str(call["event"]), payload),
                    "metadata": {"orchestrator": {"event": call["event"], "payload": payload}},
                }
            )
        return found


def _same_message(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(key) == b.get(key) for key in ("role", "content", "toolCalls", "toolCallId"))


def _aligned(history: list[Any], logged: list[dict[str, Any]], thread: str) -> list[dict[str, Any]]:
    """The history's messages in its order, each taking the id of the next logged message like it.

    A message no log holds is ``<thread>.h<position>``; logged messages after the last one the history holds
    (not stored yet) follow it. The history past the last logged message (the running request's, written
    since the log was read) is left out: the run streams it.
    """
    out: list[dict[str, Any]] = []
    cursor = 0
    for position, stored in enumerate(history):
        if logged and cursor == len(logged):
            break
        shaped = _message_json(stored, f"{thread}.h{position}") if isinstance(stored, dict) else None
        if shaped is None:
            continue
        match = next((k for k in range(cursor, len(logged)) if _same_message(logged[k], shaped)), None)
        if match is None:
            out.append(shaped)
        else:
            out.append(logged[match])
            cursor = match + 1
    return out + logged[cursor:]


def _with_subagents(messages: list[dict[str, Any]], current: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the running request's subagents' messages, each after the message it followed."""
    out = list(messages)
    anchor: str | None = None
    for message in current:
        if "subagentRunId" not in message:
            anchor = message["id"]
            continue
        at = next((i + 1 for i, m in enumerate(out) if m["id"] == anchor), len(out)) if anchor is not None else 0
        while at < len(out) and "subagentRunId" in out[at]:
            at += 1
        out.insert(at, message)
    return out


def _call_key(session_id: object, request_id: object, call: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return str(session_id), str(request_id), str(call["tool_call_id"]), str(call["response_event"])


def _answer_key(answer: Answer) -> tuple[str, str, str, str]:
    session_id, request_id = answer.interrupt.target
    return session_id, request_id, answer.interrupt.tool_call_id, answer.interrupt.response_event


def _result(event: Mapping[str, Any]) -> Any:
    result = event.get("result")
    return result.get("content") if isinstance(result, dict) else None


def sse(event: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(event, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


async def _abort(run: AguiRun) -> None:
    """The client went away mid-run: AG-UI has no other cancel, so the run's request is cancelled."""
    if run.machine.is_final:
        return
    run.machine.fire("abort")
    if run.request_id is not None:
        with contextlib.suppress(UnknownRun):
            await run.backend.cancel(run.request_id)


def _failed(run: AguiRun, error: Exception) -> bytes:
    if run.machine.may("fail"):
        run.machine.fire("fail")
    return sse(_error(type(error).__name__, str(error)))


async def agui_route(backend: Backend, max_body_bytes: int, request: Request) -> Response:
    """``POST /ag-ui``: refused with a 4xx when the body is no RunAgentInput, else the run's SSE stream."""
    body = await read_object(request, max_body_bytes)
    run = AguiRun(backend, run_input(body))
    frames = (sse(event) async for event in run.events())
    return ProtocolStreamResponse(frames, lambda error: _failed(run, error), lambda: _abort(run))

"""A2A's JSON shapes, in protocol 1.0 and in 0.3: tasks, messages, parts, stream results, the agent card.

1.0 names states and roles in SCREAMING_SNAKE_CASE and tells objects apart by their
member names; 0.3 names them in kebab-case and tells them apart by ``kind``. Every
encoder here takes the version it answers in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import attrs

Version = Literal["1.0", "0.3"]
VERSIONS: tuple[Version, ...] = ("1.0", "0.3")

TASK_STATES = ("submitted", "working", "input-required", "completed", "failed", "canceled", "rejected")
"""The A2A task states a task of ours can be in (0.3 spelling)."""
TERMINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})


def now() -> str:
    """The current time as A2A writes it: ISO 8601, UTC, milliseconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def state_name(state: str, version: Version) -> str:
    """``state`` (0.3 spelling) as ``version`` writes it."""
    return state if version == "0.3" else "TASK_STATE_" + state.replace("-", "_").upper()


def text_part(text: str, version: Version) -> dict[str, Any]:
    return {"kind": "text", "text": text} if version == "0.3" else {"text": text}


def data_part(data: Mapping[str, Any], version: Version) -> dict[str, Any]:
    if version == "0.3":
        return {"kind": "data", "data": dict(data)}
    return {"data": dict(data), "mediaType": "application/json"}


@attrs.frozen
class A2AMessage:
    """A message of a task: who said it (``user`` or ``agent``), its text and data parts."""

    message_id: str
    role: Literal["user", "agent"]
    texts: tuple[str, ...] = ()
    data: tuple[Mapping[str, Any], ...] = ()

    def json(self, task_id: str, context_id: str, version: Version) -> dict[str, Any]:
        parts = [text_part(t, version) for t in self.texts] + [data_part(d, version) for d in self.data]
        body: dict[str, Any] = {
            "messageId": self.message_id,
            "contextId": context_id,
            "taskId": task_id,
            "role": self.role if version == "0.3" else f"ROLE_{self.role.upper()}",
            "parts": parts,
        }
        if version == "0.3":
            body["kind"] = "message"
        return body


@attrs.frozen
class A2ATask:
    """A task as A2A sees one request of ours: its state, the status message, its answer and its history."""

    task_id: str
    context_id: str
    state: str
    status_message: A2AMessage | None = None
    answer: str | None = None
    history: tuple[A2AMessage, ...] = ()
    timestamp: str = attrs.field(factory=now)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def interrupted(self) -> bool:
        """Terminal or waiting for input: where a blocking call returns and a stream ends."""
        return self.terminal or self.state == "input-required"

    def status_json(self, version: Version) -> dict[str, Any]:
        status: dict[str, Any] = {"state": state_name(self.state, version), "timestamp": self.timestamp}
        if self.status_message is not None:
            status["message"] = self.status_message.json(self.task_id, self.context_id, version)
        return status

    def artifacts_json(self, version: Version) -> list[dict[str, Any]]:
        if self.answer is None:
            return []
        return [answer_artifact(self.task_id, self.answer, version)]

    def json(self, version: Version, history_length: int | None = None) -> dict[str, Any]:
        history = list(self.history)
        if history_length is not None:
            history = history[len(history) - history_length :] if history_length else []
        body: dict[str, Any] = {
            "id": self.task_id,
            "contextId": self.context_id,
            "status": self.status_json(version),
            "artifacts": self.artifacts_json(version),
            "history": [m.json(self.task_id, self.context_id, version) for m in history],
        }
        if version == "0.3":
            body["kind"] = "task"
        return body


def task_result(task: A2ATask, version: Version, history_length: int | None = None) -> dict[str, Any]:
    """The result of SendMessage: the task, wrapped as 1.0's SendMessageResponse or bare as 0.3's."""
    body = task.json(version, history_length)
    return body if version == "0.3" else {"task": body}


def stream_task(task: A2ATask, version: Version) -> dict[str, Any]:
    """A stream's first result: the task as it is."""
    return task_result(task, version)


def stream_status(task: A2ATask, version: Version) -> dict[str, Any]:
    """A stream result saying the task's status changed; 0.3 marks the last one ``final``."""
    event: dict[str, Any] = {"taskId": task.task_id, "contextId": task.context_id, "status": task.status_json(version)}
    if version == "0.3":
        return {"kind": "status-update", **event, "final": task.interrupted}
    return {"statusUpdate": event}


def answer_artifact(task_id: str, text: str, version: Version) -> dict[str, Any]:
    """The artifact ``answer`` of a task, holding ``text`` as its one text part."""
    return {"artifactId": f"{task_id}-answer", "name": "answer", "parts": [text_part(text, version)]}


def stream_artifact(
    task_id: str, context_id: str, text: str, version: Version, *, append: bool, last_chunk: bool
) -> dict[str, Any]:
    """A stream result carrying a chunk of the task's answer: ``append`` adds its text part to the parts
    sent before, else it (re)starts the artifact; ``last_chunk`` says the answer is whole."""
    event: dict[str, Any] = {
        "taskId": task_id,
        "contextId": context_id,
        "artifact": answer_artifact(task_id, text, version),
        "append": append,
        "lastChunk": last_chunk,
    }
    if version == "0.3":
        return {"kind": "artifact-update", **event}
    return {"artifactUpdate": event}


@attrs.frozen
class SkillInfo:
    """A skill of the card: one tool of the agent."""

    name: str
    description: str


@attrs.frozen
class CardInfo:
    """What the agent card says of the agent: its name, description, version and skills."""

    name: str = "orchestrator"
    description: str = "An agent whose requests run as formal state machines."
    version: str = "1.0.0"
    skills: tuple[SkillInfo, ...] = ()


BEARER_SCHEME = "bearer"


def agent_card(info: CardInfo, endpoint: str, *, bearer: bool) -> dict[str, Any]:
    """The public agent card: 1.0's ``supportedInterfaces`` and 0.3's ``url``, ``protocolVersion`` and the rest."""
    skills = [
        {"id": skill.name, "name": skill.name, "description": skill.description or skill.name, "tags": ["tool"]}
        for skill in info.skills
    ] or [
        {
            "id": "chat",
            "name": "chat",
            "description": "Answers a message; may ask for approval or for an answer before it goes on.",
            "tags": ["chat"],
            "examples": ["What can you do?"],
        }
    ]
    card: dict[str, Any] = {
        "name": info.name,
        "description": info.description,
        "version": info.version,
        "supportedInterfaces": [
            {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "url": endpoint,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
        "capabilities": {"streaming": True, "pushNotifications": False, "extendedAgentCard": False},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills,
    }
    if bearer:
        card["securitySchemes"] = {
            BEARER_SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "description": "Authorization: Bearer <the service's token>",
                "httpAuthSecurityScheme": {"scheme": "Bearer"},
            }
        }
        card["security"] = [{BEARER_SCHEME: []}]
        card["securityRequirements"] = [{"schemes": {BEARER_SCHEME: {"list": []}}}]
    return card


def skills_of(tools: Sequence[Any]) -> tuple[SkillInfo, ...]:
    """One skill per tool definition (its name and description)."""
    return tuple(SkillInfo(str(tool.name), str(getattr(tool, "description", "") or "")) for tool in tools)


def openapi_paths() -> dict[str, Any]:
    """The two A2A routes as OpenAPI path items (the JSON-RPC methods are A2A's; see docs/a2a.md)."""
    rpc_body = {
        "type": "object",
        "required": ["jsonrpc", "method"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "method": {
                "type": "string",
                "description": "SendMessage, SendStreamingMessage, GetTask, ListTasks, "
                "CancelTask, SubscribeToTask (or 0.3's message/send, message/stream, tasks/get, tasks/list, "
                "tasks/cancel, tasks/resubscribe)",
            },
            "params": {"type": "object"},
        },
    }
    refusal = {"description": "refused", "content": {"application/json": {"schema": {"type": "object"}}}}
    return {
        "/.well-known/agent-card.json": {
            "get": {
                "summary": "the A2A agent card (public); it declares the bearer scheme when a token is set",
                "responses": {
                    "200": {"description": "the card", "content": {"application/json": {"schema": {"type": "object"}}}}
                },
            }
        },
        "/a2a": {
            "post": {
                "summary": "A2A JSON-RPC (protocol 1.0, and 0.3's method names and shapes); the A2A-Version header "
                "picks the shapes. Errors are JSON-RPC errors with A2A's codes in a 200 answer; the streaming "
                "methods answer Server-Sent Events whose data are JSON-RPC responses",
                "parameters": [
                    {"name": "A2A-Version", "in": "header", "required": False, "schema": {"type": "string"}}
                ],
                "requestBody": {"required": True, "content": {"application/json": {"schema": rpc_body}}},
                "responses": {
                    "200": {
                        "description": "a JSON-RPC response, or a stream of them",
                        "content": {
                            "application/json": {"schema": {"type": "object"}},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    "401": refusal,
                    "413": refusal,
                    "415": refusal,
                },
            }
        },
    }

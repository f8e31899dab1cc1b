"""A2A's JSON-RPC requests checked where they enter: the envelope, the version, the params; A2A's error codes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from starlette.requests import Request

from orchestrator.server.bodies import decode_json, require_json, whole_number
from orchestrator.server.errors import HTTPRefusal
from orchestrator.server.ids import id_problem
from orchestrator.server.protocols.a2a_wire import VERSIONS, Version

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
EXTENDED_CARD_NOT_CONFIGURED = -32007
VERSION_NOT_SUPPORTED = -32009

METHODS: dict[str, tuple[str, Version]] = {
    "SendMessage": ("send", "1.0"),
    "SendStreamingMessage": ("stream", "1.0"),
    "GetTask": ("get", "1.0"),
    "ListTasks": ("list", "1.0"),
    "CancelTask": ("cancel", "1.0"),
    "SubscribeToTask": ("subscribe", "1.0"),
    "message/send": ("send", "0.3"),
    "message/stream": ("stream", "0.3"),
    "tasks/get": ("get", "0.3"),
    "tasks/list": ("list", "0.3"),
    "tasks/cancel": ("cancel", "0.3"),
    "tasks/resubscribe": ("subscribe", "0.3"),
}
"""Each JSON-RPC method (1.0's name and 0.3's) and what it does; the name's version is the default answer shape."""
_PUSH_METHODS = ("PushNotificationConfig", "pushNotificationConfig")
_EXTENDED_CARD_METHODS = ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard")


class RpcError(Exception):
    """A JSON-RPC error answer: A2A's ``code`` and a message that says why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def json(self, rpc_id: object) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": self.code, "message": self.message}}


def invalid(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, message)


@attrs.frozen
class Incoming:
    """A user's message as sent: the task and context it names, its text and its data parts."""

    task_id: str | None
    context_id: str | None
    texts: tuple[str, ...]
    data: tuple[Mapping[str, Any], ...]

    @property
    def text(self) -> str:
        return "\n".join(self.texts)


def optional_id(value: object, what: str) -> str | None:
    if value is None or value == "":
        return None
    problem = id_problem(value)
    if problem is not None:
        raise invalid(f"{what} {problem}")
    assert isinstance(value, str)
    return value


def incoming_message(params: Mapping[str, Any]) -> Incoming:
    """``params.message`` checked: a user message of text and data parts; InvalidParams naming what is wrong."""
    message = params.get("message")
    if not isinstance(message, dict):
        raise invalid("params.message must be an object")
    if message.get("role") not in ("user", "ROLE_USER"):
        raise invalid(f"params.message.role must be 'ROLE_USER' (or 0.3's 'user'), not {message.get('role')!r}")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise invalid("params.message.parts must be a non-empty list")
    texts: list[str] = []
    data: list[Mapping[str, Any]] = []
    for index, part in enumerate(parts):
        if not isinstance(part, dict):
            raise invalid(f"params.message.parts[{index}] must be an object")
        if "text" in part:
            if not isinstance(part["text"], str):
                raise invalid(f"params.message.parts[{index}].text must be a string")
            texts.append(part["text"])
        elif "data" in part:
            if not isinstance(part["data"], dict):
                raise invalid(f"params.message.parts[{index}].data must be an object")
            data.append(part["data"])
        elif {"file", "url", "raw"} & set(part) or part.get("kind") == "file":
            raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, f"params.message.parts[{index}]: file parts are not accepted")
        else:
            raise invalid(f"params.message.parts[{index}] is neither a text nor a data part")
    return Incoming(
        optional_id(message.get("taskId"), "params.message.taskId"),
        optional_id(message.get("contextId"), "params.message.contextId"),
        tuple(texts),
        tuple(data),
    )


def task_id_of(params: Mapping[str, Any]) -> str:
    task_id = optional_id(params.get("id"), "params.id")
    if task_id is None:
        raise invalid("params.id (the task's id) is required")
    return task_id


def history_length_of(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid("historyLength must be a non-negative integer")
    return value


def blocking_of(params: Mapping[str, Any]) -> bool:
    configuration = params.get("configuration") or {}
    if not isinstance(configuration, dict):
        raise invalid("params.configuration must be an object")
    return not (configuration.get("returnImmediately") is True or configuration.get("blocking") is False)


def requested_version(header: str | None, method_version: Version) -> Version:
    """The version to answer in: the ``A2A-Version`` header's (major.minor), else the method name's."""
    if header is None or not header.strip():
        return method_version
    parts = header.strip().split(".")
    wanted = ".".join(parts[:2])
    for version in VERSIONS:
        if wanted == version:
            return version
    raise RpcError(VERSION_NOT_SUPPORTED, f"A2A-Version {header!r} is not served; versions: {', '.join(VERSIONS)}")


async def read_request(request: Request, max_body_bytes: int) -> dict[str, Any]:
    """The body as a JSON object: 413/415 refusals, else JSON-RPC parse and request errors."""
    require_json(request)
    declared = request.headers.get("content-length")
    too_large = HTTPRefusal(413, "PayloadTooLarge", f"the body is over the limit of {max_body_bytes} bytes")
    if declared is not None and whole_number(declared, "Content-Length") > max_body_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body_bytes:
            raise too_large
        chunks.append(chunk)
    try:
        value = decode_json(b"".join(chunks))
    except HTTPRefusal as refusal:
        raise RpcError(PARSE_ERROR, refusal.message) from None
    if not isinstance(value, dict):
        raise RpcError(INVALID_REQUEST, f"a request must be a JSON-RPC object, not {type(value).__name__}")
    return value

def envelope(body: Mapping[str, Any], header: str | None) -> tuple[str, Version, Mapping[str, Any]]:
    """What the request asks (a METHODS kind), the version to answer in, and its params."""
    if body.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, "'jsonrpc' must be \"2.0\"")
    rpc_id = body.get("id")
    if rpc_id is not None and (isinstance(rpc_id, bool) or not isinstance(rpc_id, (str, int))):
        raise RpcError(INVALID_REQUEST, "'id' must be a string, an integer or null")
    method = body.get("method")
    if not isinstance(method, str):
        raise RpcError(INVALID_REQUEST, "'method' must be a string")
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise invalid("'params' must be an object")
    if method not in METHODS:
        if any(name in method for name in _PUSH_METHODS):
            raise RpcError(PUSH_NOTIFICATION_NOT_SUPPORTED, "push notifications are not supported")
        if method in _EXTENDED_CARD_METHODS:
            raise RpcError(EXTENDED_CARD_NOT_CONFIGURED, "there is no extended agent card")
        raise RpcError(METHOD_NOT_FOUND, f"no method {method!r}; methods: {', '.join(METHODS)}")
    kind, method_version = METHODS[method]
    return kind, requested_version(header, method_version), params

"""ClientToolsExtension: tools a client declares (AG-UI's frontend tools), run by the client.

``declare(session_id, tools)`` offers the tools to the model in that session's
next requests, beside the agent's own (an agent tool of the same name wins).
A request also offers the tools its ``AgentRunConfig.metadata`` names under
``CLIENT_TOOLS_KEY`` (``client_tools_metadata(tools)``): they are stored with
a durable run, so the worker that resumes it offers them too. A
call of one pauses in awaiting_approval (through a ResponseRouter) and streams a
``client_tool_call`` event (``tool_call_id``, ``tool_name``, ``arguments``,
``response_event``); the client runs the tool and answers with
``client_tool_result``: ``{"tool_call_id": ..., "content": str, "error"?: bool}``.
The content is the tool result, failed when ``error`` is true.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Verdict
from orchestrator.events import AgentEvent, RunCancelledEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import ToolCall
from orchestrator.runtime.pending import ResponseRouter, SettledAnswer, WaitRule
from orchestrator.tools import ToolDefinition, ToolResult

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

CALL_EVENT = "client_tool_call"
RESULT_EVENT = "client_tool_result"
CLIENT_TOOLS_KEY = "orchestrator.client_tools"
"""The ``AgentRunConfig.metadata`` key of the client's tools a request offers."""


class ClientToolsUnreadable(ValueError):
    """A request's metadata names client tools that are not ``[{name, description, parameters}]``."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"metadata[{CLIENT_TOOLS_KEY!r}]: {reason}")
        self.reason = reason


@attrs.frozen(kw_only=True)
class ClientToolCallEvent(AgentEvent):
    """The model called a tool the client runs; answer with ``response_event`` and the result as ``content``."""

    kind: ClassVar[str] = CALL_EVENT
    tool_call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    response_event: str = RESULT_EVENT


@attrs.frozen
class ClientTool:
    """A tool the client declares: its name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


def client_tools_metadata(tools: Iterable[ClientTool]) -> dict[str, Any]:
    """The ``AgentRunConfig.metadata`` that offers ``tools`` in one request."""
    found = [{"name": t.name, "description": t.description, "parameters": dict(t.parameters)} for t in tools]
    return {CLIENT_TOOLS_KEY: found}


def client_tools_of(metadata: Mapping[str, Any]) -> tuple[ClientTool, ...]:
    """The client tools ``metadata`` names (none when it names none); ClientToolsUnreadable when malformed."""
    listed = metadata.get(CLIENT_TOOLS_KEY)
    if listed is None:
        return ()
    if not isinstance(listed, list):
        raise ClientToolsUnreadable("must be a list of tools")
    found = []
    for index, tool in enumerate(listed):
        if not isinstance(tool, dict):
            raise ClientToolsUnreadable(f"tool {index} is not an object")
        name, description, parameters = tool.get("name"), tool.get("description", ""), tool.get("parameters")
        if not isinstance(name, str) or not name or not isinstance(description, str):
            raise ClientToolsUnreadable(f"tool {index} needs a non-empty string name and a string description")
        if not isinstance(parameters, dict):
            raise ClientToolsUnreadable(f"tool {index} needs an object of parameters")
        found.append(ClientTool(name, description, parameters))
    return tuple(found)


def _check_result(payload: Mapping[str, Any]) -> str | None:
    if not isinstance(payload.get("content"), str):
        return "'content' must be a string"
    if not isinstance(payload.get("error", False), bool):
        return "'error' must be a bool"
    return None


CLIENT_TOOL_WAIT = WaitRule(
    RESULT_EVENT,
    lambda asked: _check_result,
    lambda asked, answer: SettledAnswer(str(answer["content"]), "failed" if answer.get("error") else "succeeded"),
)
"""A client's result for a call whose process stopped (or that waits in a run store): checked like a live one."""


class ClientToolsExtension(AgentExtension):
    """Offers the tools a session's client declared, and routes the client's results back to waiting calls."""

    def __init__(self) -> None:
        self.router = ResponseRouter()
        self._declared: dict[str, tuple[ClientTool, ...]] = {}
        self._lock = threading.Lock()

    def declare(self, session_id: str, tools: Iterable[ClientTool]) -> None:
        """Offer ``tools`` in the session's next requests (safe from any thread); none withdraws them."""
        with self._lock:
            self._declared[session_id] = tuple(tools)

    def declared(self, session_id: str) -> tuple[ClientTool, ...]:
        with self._lock:
            return self._declared.get(session_id, ())

    def _definition(self, tool: ClientTool) -> ToolDefinition:
        router = self.router

        async def run_on_client(context: AgentRunContext, call: ToolCall, **arguments: Any) -> ToolResult:
            answer = await router.wait(
                context,
                call.id,
                response_event=RESULT_EVENT,
                validate=_check_result,
                announce=ClientToolCallEvent(tool_call_id=call.id, tool_name=tool.name, arguments=dict(arguments)),
            )
            return ToolResult(str(answer["content"]), "failed" if answer.get("error") else "succeeded")

        return ToolDefinition(
            tool.name,
            tool.description,
            tool.parameters,
            handler=run_on_client,
            inject=(("context", "context"), ("call", "call")),
        )

    async def on_tool(self, context: AgentRunContext) -> None:
        """Offer the session's declared tools and the request's own (its metadata's) that the agent has no tool
        of the same name for; ClientToolsUnreadable when the metadata's are malformed."""
        for tool in (*self.declared(context.session_id), *client_tools_of(context.metadata)):
            if tool.name not in context.tools:
                context.register_tool(self._definition(tool))

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        self.router.withdraw_request(context.session_id, context.request_id)

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        if isinstance(event, RunCancelledEvent):
            self.router.withdraw_request(context.session_id, context.request_id)

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Verdict:
        """Take a ``client_tool_result`` that answers a waiting call of this session, or say why not."""
        return event.name == RESULT_EVENT and self.router.consider(config, event)

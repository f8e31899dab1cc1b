"""Agent requests as explicit state machines under trio."""

import logging
from typing import TYPE_CHECKING

from orchestrator import (
    _loading,  # pauses the cycle collector until the package has loaded
    _moved,
)

_moved.install()  # module paths that moved into packages keep working (orchestrator.stream, ...)

try:
    from orchestrator.agent import Agent, AgentClient, create_agent
    from orchestrator.config import AgentRunConfig, ExternalEvent
    from orchestrator.delivery import Delivery, Refusal
    from orchestrator.errors import (
        AgentError,
        GuardrailTripped,
        GuardRefused,
        IllegalTransition,
        InputGuardrailTripped,
        MaxIterationsExceeded,
        ModelError,
        OutputGuardrailTripped,
        SessionBusy,
        ToolArgumentsError,
        ToolRejected,
    )
    from orchestrator.events import AgentEvent, ExtensionEvent
    from orchestrator.extensions.base import AgentExtension
    from orchestrator.limits import RequestDeadlineExceeded, RunUsage, UsageLimitExceeded, UsageLimits
    from orchestrator.messages import (
        AssistantMessage,
        ImagePart,
        Message,
        ReasoningBlock,
        SystemMessage,
        TextPart,
        ToolCall,
        ToolMessage,
        ToolStatus,
        UserMessage,
        describe_parts,
    )
    from orchestrator.model import (
        Model,
        ModelRequest,
        ModelSettings,
        ScriptedModel,
        StopReason,
        UnsupportedSetting,
        Usage,
    )
    from orchestrator.output import OutputType, OutputValidationError, StructuredAnswer
    from orchestrator.runtime.context import AgentRunContext
    from orchestrator.runtime.handle import EventsExpired, RunCancelled, RunHandle, UnknownRun
    from orchestrator.runtime.pending import PendingCall, ResponseRouter
    from orchestrator.runtime.stream import RunStream
    from orchestrator.tools import ServerToolDefinition, ToolDefinition, ToolResult, tool
finally:
    _loading.resume()

if TYPE_CHECKING:
    from orchestrator.events import SubagentCompletedEvent, SubagentStartedEvent
    from orchestrator.extensions.guardrails import (
        GuardrailResult,
        GuardrailsExtension,
        input_guardrail,
        output_guardrail,
    )
    from orchestrator.extensions.subagent import SubAgentExtension, agent_tool
    from orchestrator.wire.format import (
        RemoteError,
        WireFormatError,
        decode_event,
        decode_message,
        dumps,
        encode_error,
        encode_event,
        encode_message,
    )

# A library logs; the application decides where to (nothing reaches stderr unless it configures logging).
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "Agent",
    "AgentClient",
    "AgentError",
    "AgentEvent",
    "AgentExtension",
    "AgentRunConfig",
    "AgentRunContext",
    "AssistantMessage",
    "Delivery",
    "EventsExpired",
    "ExtensionEvent",
    "ExternalEvent",
    "GuardRefused",
    "GuardrailResult",
    "GuardrailTripped",
    "GuardrailsExtension",
    "IllegalTransition",
    "ImagePart",
    "InputGuardrailTripped",
    "MaxIterationsExceeded",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelSettings",
    "OutputGuardrailTripped",
    "OutputType",
    "OutputValidationError",
    "PendingCall",
    "ReasoningBlock",
    "Refusal",
    "RemoteError",
    "RequestDeadlineExceeded",
    "ResponseRouter",
    "RunCancelled",
    "RunHandle",
    "RunStream",
    "RunUsage",
    "ScriptedModel",
    "ServerToolDefinition",
    "SessionBusy",
    "StopReason",
    "StructuredAnswer",
    "SubAgentExtension",
    "SubagentCompletedEvent",
    "SubagentStartedEvent",
    "SystemMessage",
    "TextPart",
    "ToolArgumentsError",
    "ToolCall",
    "ToolDefinition",
    "ToolMessage",
    "ToolRejected",
    "ToolResult",
    "ToolStatus",
    "UnknownRun",
    "UnsupportedSetting",
    "Usage",
    "UsageLimitExceeded",
    "UsageLimits",
    "UserMessage",
    "WireFormatError",
    "agent_tool",
    "create_agent",
    "decode_event",
    "decode_message",
    "describe_parts",
    "dumps",
    "encode_error",
    "encode_event",
    "encode_message",
    "input_guardrail",
    "output_guardrail",
    "tool",
]


#: Names loaded on first use, by the module that defines them: running a request needs none of them.
_LAZY = {
    # Sub-agents (tools that run another agent): built when an application asks for them.
    "SubAgentExtension": "extensions.subagent",
    "agent_tool": "extensions.subagent",
    "SubagentCompletedEvent": "events",
    "SubagentStartedEvent": "events",
    # Guardrails: checks of the input and the final answer, loaded when an application uses them.
    "GuardrailResult": "extensions.guardrails",
    "GuardrailsExtension": "extensions.guardrails",
    "input_guardrail": "extensions.guardrails",
    "output_guardrail": "extensions.guardrails",
    # They bring asyncio, which trio code does not need.
    "AgentHost": "host",
    "HostedRun": "host",
    # The wire codecs (JSON encoding of events, messages and errors).
    "RemoteError": "wire",
    "WireFormatError": "wire",
    "decode_event": "wire",
    "decode_message": "wire",
    "dumps": "wire",
    "encode_error": "wire",
    "encode_event": "wire",
    "encode_message": "wire",
    # The model adapters (httpx itself loads only on the first request).
    "AnthropicModel": "providers",
    "GeminiModel": "providers",
    "OpenAIChatModel": "providers",
    "OpenAIResponsesModel": "providers",
}


def __getattr__(name: str) -> object:
    """The names of ``_LAZY``, imported from their module the first time they are asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

"""Agent requests as explicit state machines under trio."""

import logging

from orchestrator.agent import Agent, AgentClient, create_agent
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.context import AgentRunContext
from orchestrator.delivery import Delivery, Refusal
from orchestrator.errors import (
    AgentError,
    GuardRefused,
    IllegalTransition,
    MaxIterationsExceeded,
    ModelError,
    SessionBusy,
    ToolArgumentsError,
    ToolRejected,
)
from orchestrator.events import AgentEvent, ExtensionEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.handle import EventsExpired, RunCancelled, RunHandle, UnknownRun
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
from orchestrator.model import Model, ModelRequest, ScriptedModel, StopReason, Usage
from orchestrator.pending import PendingCall, ResponseRouter
from orchestrator.stream import RunStream
from orchestrator.tools import ServerToolDefinition, ToolDefinition, ToolResult, tool
from orchestrator.wire import (
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
    "IllegalTransition",
    "ImagePart",
    "MaxIterationsExceeded",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "PendingCall",
    "ReasoningBlock",
    "Refusal",
    "RemoteError",
    "ResponseRouter",
    "RunCancelled",
    "RunHandle",
    "RunStream",
    "ScriptedModel",
    "ServerToolDefinition",
    "SessionBusy",
    "StopReason",
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
    "Usage",
    "UserMessage",
    "WireFormatError",
    "create_agent",
    "decode_event",
    "decode_message",
    "describe_parts",
    "dumps",
    "encode_error",
    "encode_event",
    "encode_message",
    "tool",
]


def __getattr__(name: str) -> object:
    """``AgentHost`` and ``HostedRun`` load on first use: they bring asyncio, which trio code does not need."""
    if name in ("AgentHost", "HostedRun"):
        from orchestrator import host

        return getattr(host, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

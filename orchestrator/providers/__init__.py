"""Models over HTTP: OpenAI-compatible Chat Completions and Anthropic Messages.

Importing this package does not import httpx; the first request does.
"""

from orchestrator.providers.anthropic import AnthropicModel
from orchestrator.providers.errors import (
    AuthenticationError,
    BadRequestError,
    MalformedStreamError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
    error_from_response,
)
from orchestrator.providers.openai import OpenAIChatModel
from orchestrator.providers.retry import RetryPolicy
from orchestrator.providers.sse import ServerSentEvent, parse_sse

__all__ = [
    "AnthropicModel",
    "AuthenticationError",
    "BadRequestError",
    "MalformedStreamError",
    "OpenAIChatModel",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeoutError",
    "RateLimitError",
    "RetryPolicy",
    "ServerError",
    "ServerSentEvent",
    "error_from_response",
    "parse_sse",
]

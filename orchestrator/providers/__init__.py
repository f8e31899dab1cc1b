"""Models over HTTP: OpenAI-compatible Chat Completions, the OpenAI Responses API, Anthropic Messages
and Google Gemini.

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
from orchestrator.providers.gemini import GeminiModel
from orchestrator.providers.openai import OpenAIChatModel
from orchestrator.providers.openai_responses import OpenAIResponsesModel
from orchestrator.providers.rate_limit import RateLimit
from orchestrator.providers.retry import RetryPolicy
from orchestrator.providers.sse import ServerSentEvent, parse_sse

__all__ = [
    "AnthropicModel",
    "AuthenticationError",
    "BadRequestError",
    "GeminiModel",
    "MalformedStreamError",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeoutError",
    "RateLimit",
    "RateLimitError",
    "RetryPolicy",
    "ServerError",
    "ServerSentEvent",
    "error_from_response",
    "parse_sse",
]

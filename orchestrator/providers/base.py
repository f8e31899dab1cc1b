"""What both HTTP providers share: settings from arguments or environment, retried streaming."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict

import attrs

from orchestrator.checks import function, mapping, number, of_type, whole
from orchestrator.checks import text as _text
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent
from orchestrator.output import OutputType
from orchestrator.providers.rate_limit import RateLimit, rate_limited
from orchestrator.providers.retry import RetryPolicy, Sleep, stream_with_retry

if TYPE_CHECKING:
    import httpx


#: Seconds a started stream may send only keepalives before ProviderTimeoutError.
DEFAULT_IDLE_TIMEOUT = 300.0


def unwrapped_answer(completed: ResponseCompletedEvent, output: OutputType | None) -> ResponseCompletedEvent:
    """``completed`` with an answer to a wrapped output schema (``{"value": ...}``) made the value's JSON."""
    if output is None or not output.wrapped or completed.message.tool_calls:
        return completed
    text = output.unwrapped(completed.message.content)
    if text == completed.message.content:
        return completed
    return attrs.evolve(completed, message=attrs.evolve(completed.message, content=text))


class ProviderSettings(TypedDict, total=False):
    """The keyword arguments every adapter takes, passed on to ``HTTPStreamingModel``.

    ``api_key`` and ``base_url`` default to ``<PREFIX>_API_KEY`` / ``<PREFIX>_BASE_URL``;
    ``client`` an httpx.AsyncClient to use (one per call otherwise); ``max_retries``
    (2) or a whole ``retry`` policy; ``timeout`` (60 s) httpx's bound on each
    connect, read, write and pool wait; ``idle_timeout`` (DEFAULT_IDLE_TIMEOUT) between events of a started
    stream, None for no bound; ``extra_body`` fields merged into every request body;
    ``sleep`` what waits between retries (tests pass their own); ``rate_limit`` a ``RateLimit`` (requests
    per second, tokens per minute) shared with other models of the same key. Each is checked when the
    model is made: a wrong type raises TypeError, a bad value ValueError, naming it.
    """

    api_key: str | None
    base_url: str | None
    client: httpx.AsyncClient | None
    max_retries: int
    timeout: float
    idle_timeout: float | None
    retry: RetryPolicy | None
    extra_body: Mapping[str, Any] | None
    sleep: Sleep | None
    rate_limit: RateLimit | None


class HTTPStreamingModel:
    """Base of the providers: subclasses name their environment and write ``_attempt``."""

    env_prefix: ClassVar[str]
    default_base_url: ClassVar[str]
    #: The ModelSettings fields this API has no wire field for, each with what to use instead.
    unsupported_settings: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self,
        model: str | None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        retry: RetryPolicy | None = None,
        extra_body: Mapping[str, Any] | None = None,
        sleep: Sleep | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        owner = type(self).__name__
        _text(optional=True).check(f"{owner}.model", model)
        _text(optional=True).check(f"{owner}.api_key", api_key)
        _text(optional=True).check(f"{owner}.base_url", base_url)
        whole(0).check(f"{owner}.max_retries", max_retries)
        number(above=0).check(f"{owner}.timeout", timeout)
        number(above=0, optional=True).check(f"{owner}.idle_timeout", idle_timeout)
        of_type(RetryPolicy, "a RetryPolicy", optional=True).check(f"{owner}.retry", retry)
        mapping(optional=True).check(f"{owner}.extra_body", extra_body)
        function(optional=True).check(f"{owner}.sleep", sleep)
        of_type(RateLimit, "a RateLimit", optional=True).check(f"{owner}.rate_limit", rate_limit)
        if client is not None and not callable(getattr(client, "stream", None)):
            raise TypeError(f"{owner}.client must be an httpx.AsyncClient or None, got {type(client).__name__}")
        prefix = self.env_prefix
        resolved = model or os.environ.get(f"{prefix}_MODEL")
        if not resolved:
            raise ValueError(f"{type(self).__name__} needs a model name (argument or ${prefix}_MODEL)")
        self.model = resolved
        self.base_url = (base_url or os.environ.get(f"{prefix}_BASE_URL") or self.default_base_url).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(f"{prefix}_API_KEY")
        self.client = client
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.retry = retry or RetryPolicy(max_retries=max_retries)
        self.extra_body = dict(extra_body or {})
        self.sleep = sleep
        self.rate_limit = rate_limit

    @property
    def needs_key(self) -> bool:
        """The public endpoint without a key: the first call must fail with AuthenticationError."""
        return self.api_key is None and self.base_url == self.default_base_url

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response; retried only until its first event. Each attempt waits for the rate limit."""
        limit = self.rate_limit
        if limit is None:
            return stream_with_retry(lambda: self._attempt(request), self.retry, sleep=self.sleep)
        return stream_with_retry(lambda: rate_limited(limit, request, self._attempt), self.retry, sleep=self.sleep)

    def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise NotImplementedError

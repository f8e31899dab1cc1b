"""Serving an app on a real loopback socket for the tests, and reading its SSE streams."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from orchestrator import AgentClient
from orchestrator.server import create_app


def _config() -> Config:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.5
    return config


@asynccontextmanager
async def serving(client: AgentClient, **settings: Any) -> AsyncIterator[str]:
    """The app for ``client`` served by hypercorn's trio worker; yields its base URL."""
    app = create_app(client, **settings)
    async with trio.open_nursery() as nursery:

        async def run(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            await serve(app, _config(), task_status=task_status)  # type: ignore[arg-type]

        binds = await nursery.start(run)
        try:
            yield binds[0]
        finally:
            nursery.cancel_scope.cancel()


class ServerThread:
    """The app served by its own trio loop in a thread, for synchronous clients (browser, schemathesis)."""

    def __init__(self, make_client: Callable[[], Awaitable[AgentClient]], **settings: Any) -> None:
        self.make_client = make_client
        self.settings = settings
        self.url = ""
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as error:  # handed to the test thread
            self._error = error
            self._ready.set()

    async def _serve(self) -> None:
        client = await self.make_client()
        self._token = trio.lowlevel.current_trio_token()
        async with serving(client, **self.settings) as url:
            self.url = url
            with trio.CancelScope() as scope:
                self._scope = scope
                self._ready.set()
                await trio.sleep_forever()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the server did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None and self._scope is not None:
            self._token.run_sync_soon(self._scope.cancel)
        self._thread.join(10)


class SSE:
    """One event stream: frames parsed into (id, event, data) and the decoded data."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, str, dict[str, Any]]] = []

    @property
    def events(self) -> list[dict[str, Any]]:
        return [data for _, _, data in self.frames]

    @property
    def types(self) -> list[str]:
        return [event for _, event, _ in self.frames]


async def read_sse(
    http: httpx.AsyncClient,
    url: str,
    *,
    last_event_id: int | None = None,
    stop: Callable[[dict[str, Any]], bool] | None = None,
    on_event: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> SSE:
    """Read ``url`` until the server ends the stream, or until ``stop(event)`` holds (then disconnect)."""
    got = SSE()
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            while "\n\n" in buffer:
                frame, buffer = buffer.split("\n\n", 1)
                fields: dict[str, str] = {}
                for line in frame.splitlines():
                    name, _, value = line.partition(":")
                    fields[name] = value.lstrip(" ")
                data = json.loads(fields["data"])
                got.frames.append((fields["id"], fields["event"], data))
                if on_event is not None:
                    await on_event(data)
                if stop is not None and stop(data):
                    return got
        assert buffer == "", f"the stream ended inside a frame: {buffer!r}"
    return got

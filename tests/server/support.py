"""Serving an app on a real loopback socket for the tests, and reading its SSE streams."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from orchestrator import AgentClient
from orchestrator.host import AgentHost
from orchestrator.server import create_app

HOSTS = ("hypercorn", "uvicorn")
"""The two ways the app is served: hypercorn's trio worker, and uvicorn on asyncio with the agent in an AgentHost."""


class Serving(Protocol):
    """``serving(client, **create_app settings)``: an async context manager yielding the served app's base URL."""

    def __call__(self, client: Any, **settings: Any) -> AbstractAsyncContextManager[str]: ...


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


class UvicornThread:
    """``app`` served by uvicorn on an asyncio loop in a thread of its own (under ``prefix``: mounted in Starlette)."""

    def __init__(self, app: Any, prefix: str = "") -> None:
        import uvicorn

        if prefix:
            from starlette.applications import Starlette
            from starlette.routing import Mount

            app = Starlette(routes=[Mount(prefix, app)])
        self.prefix = prefix
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", timeout_graceful_shutdown=5
            )
        )
        self.url = ""
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self._started = threading.Event()

    async def _serve(self) -> None:
        serving = asyncio.ensure_future(self.server.serve())
        while not self.server.started and not serving.done():
            await asyncio.sleep(0.01)
        if self.server.started:
            port = self.server.servers[0].sockets[0].getsockname()[1]
            self.url = f"http://127.0.0.1:{port}{self.prefix}"
        self._started.set()
        await serving

    def start(self) -> str:
        self._thread.start()
        if not self._started.wait(30) or not self.url:
            raise RuntimeError("uvicorn did not start")
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(10)


@asynccontextmanager
async def serving_uvicorn(client: Any, prefix: str = "", **settings: Any) -> AsyncIterator[str]:
    """The app for ``client`` (an AgentClient, served through an AgentHost) under uvicorn; yields its base URL.

    A Backend given instead is served as it is.
    """
    host = AgentHost(client) if isinstance(client, AgentClient) else None
    server = UvicornThread(create_app(host if host is not None else client, **settings), prefix)
    try:
        yield await trio.to_thread.run_sync(server.start)
    finally:
        await trio.to_thread.run_sync(server.stop)
        if host is not None:
            await trio.to_thread.run_sync(host.close)


def serving_on(name: str) -> Serving:
    """The ``serving`` of one host (see HOSTS)."""
    return serving if name == "hypercorn" else serving_uvicorn


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


class UvicornServer:
    """An AgentHost building its client with ``make_client``, its app under uvicorn (mounted under ``prefix``)."""

    def __init__(self, make_client: Callable[[], Awaitable[AgentClient]], prefix: str = "", **settings: Any) -> None:
        self.make_client = make_client
        self.prefix = prefix
        self.settings = settings
        self.url = ""
        self.host: AgentHost | None = None
        self._server: UvicornThread | None = None

    def __enter__(self) -> UvicornServer:
        self.host = AgentHost(self.make_client)
        self._server = UvicornThread(create_app(self.host, **self.settings), self.prefix)
        self.url = self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop()
        if self.host is not None:
            self.host.close()


def server_on(
    name: str, make_client: Callable[[], Awaitable[AgentClient]], **settings: Any
) -> ServerThread | UvicornServer:
    """The app served in a thread of its own by one host (see HOSTS), for synchronous clients."""
    return ServerThread(make_client, **settings) if name == "hypercorn" else UvicornServer(make_client, **settings)

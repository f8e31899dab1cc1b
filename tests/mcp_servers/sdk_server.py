"""An MCP server built with the SDK's MCPServer, for the tests: ``python sdk_server.py stdio | http TOKEN [PORT]``.

Over HTTP it listens on 127.0.0.1 (PORT, or a free port; printed as ``PORT <n>``
on stdout once it accepts connections) and answers 401 to every request
without ``Authorization: Bearer TOKEN``.
"""

from __future__ import annotations

import base64
import os
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

server = MCPServer("sdk-test-server", version="1.0.0")


class Weather(BaseModel):
    city: str
    celsius: float


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return f"{a} + {b} = {a + b}"


@server.tool()
def weather(city: str) -> Weather:
    """The weather in a city, as structured content."""
    return Weather(city=city, celsius=21.5)


@server.tool()
def pixel() -> Image:
    """A one-pixel PNG image."""
    return Image(data=PIXEL, format="png")


@server.tool()
def refuse(reason: str) -> str:
    """Always fails with the reason given."""
    raise ToolError(f"refused: {reason}")


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "slept"


@server.tool()
async def learn(word: str, ctx: Context) -> str:
    """Add a tool named ``word`` that answers with that word, and tell the client the tools changed."""

    def said() -> str:
        return word

    server.add_tool(said, name=word, description=f"Says {word}.")
    await ctx.notify_tools_changed()
    return f"learned {word}"


@server.tool()
def crash() -> str:
    """Exit the server process at once, without answering."""
    sys.stderr.write("sdk-test-server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


class RequireToken:
    """ASGI middleware: 401 for a request without the bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {self.token}".encode():
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                )
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
                return
        await self.app(scope, receive, send)


async def serve_http(token: str, port: int) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    port = listener.getsockname()[1]
    app = RequireToken(server.streamable_http_app(), token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)

    async def announce() -> None:
        while not web.started:
            await anyio.sleep(0.02)
        print(f"PORT {port}", flush=True)

    async with anyio.create_task_group() as group:
        group.start_soon(announce)
        await web.serve(sockets=[listener])


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
    elif mode == "http" and len(sys.argv) > 2:
        anyio.run(serve_http, sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    else:
        raise SystemExit(f"usage: {sys.argv[0]} stdio | http TOKEN [PORT]")


if __name__ == "__main__":
    main()

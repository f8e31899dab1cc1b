"""The SSE response of a protocol run: frames as they come; a client that goes away before the end cancels the run."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from orchestrator.server.streams import SSE_HEADERS

logger = logging.getLogger(__name__)


class ProtocolStreamResponse(Response):
    """Streams ``frames``; ``failed(error)`` gives the last frame of a stream whose producer raised, and
    ``aborted()`` runs (shielded) when the client disconnects before the frames end."""

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        failed: Callable[[Exception], bytes],
        aborted: Callable[[], Awaitable[None]],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(headers={**SSE_HEADERS, **(headers or {})}, media_type=self.media_type)
        self.raw_headers = [(name, value) for name, value in self.raw_headers if name != b"content-length"]
        self.frames = frames
        self.failed = failed
        self.aborted = aborted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        gone = ended = False
        async with anyio.create_task_group() as group:

            async def pump() -> None:
                nonlocal gone, ended
                try:
                    async for frame in self.frames:
                        await send({"type": "http.response.body", "body": frame, "more_body": True})
                    ended = True
                except OSError:
                    gone = True
                except Exception as error:  # a protocol stream ends with its error frame, never a cut response
                    logger.exception("the protocol stream failed")
                    ended = True
                    with anyio.move_on_after(1), contextlib.suppress(OSError):
                        await send({"type": "http.response.body", "body": self.failed(error), "more_body": True})
                group.cancel_scope.cancel()

            async def listen() -> None:
                nonlocal gone
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                group.cancel_scope.cancel()

            group.start_soon(pump)
            group.start_soon(listen)
        if gone and not ended:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.aborted()
            return
        with anyio.move_on_after(1), contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

"""The SSE response of a protocol run: frames as they come; a client that goes away before the end cancels the run."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from orchestrator.server.streams import SSE_HEADERS, stream_frames

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

    async def _guarded(self) -> AsyncIterator[bytes]:
        """The frames; a producer that raises ends them with its error frame, never a cut response."""
        try:
            async for frame in self.frames:
                yield frame
        except OSError:
            raise
        except Exception as error:
            logger.exception("the protocol stream failed")
            yield self.failed(error)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        end = await stream_frames(receive, send, self._guarded())
        if end.gone and not end.ended:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.aborted()
            return
        with anyio.move_on_after(1), contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

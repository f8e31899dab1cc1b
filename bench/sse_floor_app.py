"""The server floor: a raw ASGI app that answers the SSE workload's HTTP traffic with recorded bytes and nothing else.

``uvicorn bench.sse_floor_app:app`` or ``hypercorn --worker-class trio bench.sse_floor_app:app`` serves the
traffic recorded in the JSON file named by ``$BENCH_SSE_FLOOR`` (``bench.sse_floor.Traffic``): a POST to
``/sessions/{session}/runs`` is answered with that session's recorded 202 and JSON body; a GET of
``/runs/{request_id}/events`` with that run's recorded stream: its body chunks, one ASGI write per recorded
chunk, each sent at its recorded offset from the response's start, the last one with the body's end. No
orchestrator, no Starlette: what remains is the HTTP server's own cost.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import sniffio

ENVIRONMENT = "BENCH_SSE_FLOOR"

#: A write is only waited for when it is due this much later than now (a burst goes out without sleeps).
SLACK = 0.001

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _headers(pairs: list[list[str]]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in pairs]


with open(os.environ[ENVIRONMENT], encoding="utf-8") as _file:
    _RECORDED = json.load(_file)
ACCEPTED_HEADERS = _headers(_RECORDED["accepted_headers"])
STREAM_HEADERS = _headers(_RECORDED["stream_headers"])
#: Each session's 202 body, pre-encoded.
ACCEPTED = {session: body.encode("utf-8") for session, body in _RECORDED["accepted"].items()}
#: Each request id's stream: its chunks, pre-encoded, with their offsets.
STREAMS = {
    request_id: [(float(offset), text.encode("utf-8")) for offset, text in chunks]
    for request_id, chunks in _RECORDED["streams"].items()
}
#: A session or request id that was not recorded (the readers' warm-up) gets the first recorded one's.
ANY_ACCEPTED, ANY_STREAM = next(iter(ACCEPTED.values())), next(iter(STREAMS.values()))
del _RECORDED


async def _sleep(seconds: float) -> None:
    if sniffio.current_async_library() == "trio":
        import trio

        await trio.sleep(seconds)
    else:
        import asyncio

        await asyncio.sleep(seconds)


async def _drain(receive: Receive) -> None:
    while (await receive()).get("more_body", False):
        pass


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """POST: the recorded 202; GET: the recorded event stream; lifespan: started and stopped at once."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    if scope["method"] == "POST":  # /sessions/{session}/runs
        await _drain(receive)
        body = ACCEPTED.get(path.split("/")[2], ANY_ACCEPTED)
        headers = [*ACCEPTED_HEADERS, (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return
    chunks = STREAMS.get(path.split("/")[2], ANY_STREAM)  # /runs/{request_id}/events
    await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
    started = time.perf_counter()
    last = len(chunks) - 1
    for index, (offset, chunk) in enumerate(chunks):
        wait = offset - (time.perf_counter() - started)
        if wait > SLACK:
            await _sleep(wait)
        await send({"type": "http.response.body", "body": chunk, "more_body": index < last})

"""Open event streams learn that they must end from one shared asker (``StreamStops``) while the app's lifespan
runs it, and ask for themselves when it does not run or stops: either way a stream ends with the reason."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from orchestrator.server.streams import StreamEnd, StreamStops, stream_frames


class Stopping:
    """A StopReason whose answer the test sets; it counts how often it was asked."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.asked = 0

    def __call__(self) -> str | None:
        self.asked += 1
        return self.reason


async def _idle_reader() -> dict[str, Any]:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def _one_frame_then_nothing() -> AsyncIterator[bytes]:
    yield b"id: 1\n\n"
    await trio.sleep_forever()


async def _open_stream(stop: Stopping, stops: StreamStops | None, ends: list[StreamEnd]) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    ends.append(await stream_frames(_idle_reader, send, _one_frame_then_nothing(), stop, None, stops))
    assert [message["body"] for message in sent] == [b"id: 1\n\n"]


async def test_the_shared_asker_ends_every_open_stream_with_its_reason() -> None:
    stop = Stopping()
    stops = StreamStops(stop)
    ends: list[StreamEnd] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stops.run)
            await trio.sleep(0.05)
            assert stops.serves_here()
            for _ in range(3):
                nursery.start_soon(_open_stream, stop, stops, ends)
            while len(stops.open) < 3:
                await trio.sleep(0.01)
            asked = stop.asked
            await trio.sleep(0.6)
            assert stop.asked - asked <= 3  # once per round for all three, not once per stream
            stop.reason = "the server is shutting down"
            while len(ends) < 3:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert [(end.reason, end.gone, end.ended) for end in ends] == [("the server is shutting down", False, False)] * 3


async def test_streams_ask_for_themselves_once_the_shared_asker_stops_or_when_it_never_ran() -> None:
    stop = Stopping()
    stops = StreamStops(stop)
    ends: list[StreamEnd] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as asking:
                asking.start_soon(stops.run)
                await trio.sleep(0.05)
                nursery.start_soon(_open_stream, stop, stops, ends)
                while not stops.open:
                    await trio.sleep(0.01)
                asking.cancel_scope.cancel()
            assert not stops.serves_here()
            nursery.start_soon(_open_stream, stop, stops, ends)  # opened while nobody asks for all
            nursery.start_soon(_open_stream, stop, None, ends)
            await trio.sleep(0.1)
            stop.reason = "the agent host is closing"
            while len(ends) < 3:
                await trio.sleep(0.01)
    assert not stops.open
    assert [end.reason for end in ends] == ["the agent host is closing"] * 3


async def _frames(count: int) -> AsyncIterator[bytes]:
    await trio.sleep(0.01)  # the watcher waits in receive by now
    for index in range(count):
        yield b"id: %d\n\n" % index


@pytest.mark.parametrize("stops_running", [True, False], ids=["shared-asker", "own-asking"])
async def test_a_finished_stream_lets_its_watcher_end_by_itself_when_the_server_reports_the_response_complete(
    stops_running: bool,
) -> None:
    """As uvicorn does: once the body's end is sent, a waiting ``receive`` returns ``http.disconnect``."""
    stop = Stopping()
    stops = StreamStops(stop)
    complete = trio.Event()
    sent: list[dict[str, Any]] = []
    cancelled: list[bool] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if not message["more_body"]:
            complete.set()

    async def receive() -> dict[str, Any]:
        try:
            await complete.wait()
        except trio.Cancelled:
            cancelled.append(True)
            raise
        return {"type": "http.disconnect"}

    async def finish(end: StreamEnd) -> None:
        await send({"type": "http.response.body", "body": end.tail, "more_body": False})

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            if stops_running:
                nursery.start_soon(stops.run)
                await trio.sleep(0.05)
            end = await stream_frames(receive, send, _frames(3), stop, None, stops, finish)
            nursery.cancel_scope.cancel()
    assert (end.ended, end.finished, end.gone, end.reason, end.watching) == (True, True, False, None, False)
    assert [(message["body"], message["more_body"]) for message in sent] == [
        (b"id: 0\n\n", True),
        (b"id: 1\n\n", True),
        (b"id: 2\n\n", True),
        (b"", False),
    ]
    assert cancelled == []
    assert not stops.open


async def test_a_finished_stream_whose_server_never_reports_the_end_still_ends() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def finish(end: StreamEnd) -> None:
        await send({"type": "http.response.body", "body": end.tail, "more_body": False})

    with trio.fail_after(5):
        end = await stream_frames(_idle_reader, send, _frames(1), Stopping(), None, None, finish)
    assert (end.ended, end.finished, end.gone) == (True, True, False)
    assert [message["more_body"] for message in sent] == [True, False]

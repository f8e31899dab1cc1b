"""Open event streams learn that they must end from one shared asker (``StreamStops``) while the app's lifespan
runs it, and ask for themselves when it does not run or stops: either way a stream ends with the reason."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

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

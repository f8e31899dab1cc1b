"""StreamQueue: who waits is woken exactly when there is something for them, cancelled waits included."""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from collections.abc import Callable

import trio
import trio.testing

from orchestrator.events import AgentEvent, TextDeltaEvent
from orchestrator.runtime.sinks import StreamQueue


def _event(seq: int) -> AgentEvent:
    return TextDeltaEvent(session_id="s", request_id="r", seq=seq, text=str(seq))


async def _read_one_offered_after_it_waits(queue: StreamQueue, offer: Callable[[], bool]) -> list[AgentEvent]:
    """What a reader that waits for the next event gets once ``offer`` (which must be taken) runs."""
    got: list[AgentEvent] = []
    async with trio.open_nursery() as nursery:

        async def read() -> None:
            got.append(await queue.receive())

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        assert offer()
    return got


async def test_a_reader_cancelled_while_waiting_does_not_keep_the_next_reader_from_waking() -> None:
    queue = StreamQueue(capacity=4)
    with trio.move_on_after(0.01):
        await queue.receive()
    got = await _read_one_offered_after_it_waits(queue, lambda: queue.offer(_event(1)))
    assert [e.seq for e in got] == [1]


async def test_a_writer_cancelled_while_waiting_for_room_does_not_keep_the_next_writer_from_waking() -> None:
    queue = StreamQueue(capacity=1)
    assert queue.offer(_event(1))
    with trio.move_on_after(0.01):
        await queue.put(_event(2))
    assert len(queue) == 1
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.put, _event(3))
            await trio.testing.wait_all_tasks_blocked()
            assert queue.receive_nowait().seq == 1
    assert queue.receive_nowait().seq == 3
    assert len(queue) == 0


async def test_events_offered_before_the_reader_runs_arrive_in_order_and_wake_it_once() -> None:
    queue = StreamQueue(capacity=8)
    got: list[int] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def read_all() -> None:
                while True:
                    try:
                        got.append((await queue.receive()).seq)
                    except trio.EndOfChannel:
                        return

            nursery.start_soon(read_all)
            await trio.testing.wait_all_tasks_blocked()
            for seq in range(1, 6):
                assert queue.offer(_event(seq))
            await trio.testing.wait_all_tasks_blocked()
            assert queue.offer(_event(6))
            queue.close()
    assert got == [1, 2, 3, 4, 5, 6]


async def test_a_waiting_reader_sees_the_end_when_the_queue_closes() -> None:
    queue = StreamQueue()
    ended = False
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                nonlocal ended
                try:
                    await queue.receive()
                except trio.EndOfChannel:
                    ended = True

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            queue.close()
    assert ended


async def test_a_second_reader_waiting_at_once_is_refused_instead_of_never_waking() -> None:
    queue = StreamQueue(capacity=4)
    got: list[AgentEvent] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                got.append(await queue.receive())

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            try:
                await queue.receive()
            except trio.BusyResourceError as busy:
                assert "already waiting" in str(busy)
            else:
                raise AssertionError("a second reader was let wait")
            assert queue.offer(_event(1))
    assert [e.seq for e in got] == [1]


def test_a_text_delta_taken_as_its_parts_is_read_as_the_event_in_its_place() -> None:
    queue = StreamQueue(capacity=3)
    queue.stamp("session-1", "request-1")
    assert queue.offer(_event(1))
    assert queue.offer_text("héllo", 2, 12.5)
    assert queue.offer(_event(3))
    assert not queue.offer_text("late", 4, 13.0)  # full: three events queued, a delta counts as one
    assert len(queue) == 3
    first, delta, third = queue.receive_nowait(), queue.receive_nowait(), queue.receive_nowait()
    assert [first.seq, third.seq] == [1, 3]
    assert type(delta) is TextDeltaEvent
    assert delta == TextDeltaEvent(session_id="session-1", request_id="request-1", seq=2, ts=12.5, text="héllo")
    assert len(queue) == 0


def test_queued_text_deltas_add_no_objects_for_the_garbage_collector() -> None:
    queue = StreamQueue(capacity=10_000)
    queue.stamp("s", "r")
    gc.collect()
    before = len(gc.get_objects())
    for seq in range(1, 5_001):
        assert queue.offer_text(f"piece {seq}", seq, float(seq))
    tracked = len(gc.get_objects()) - before
    assert tracked < 50, f"{tracked} tracked objects for 5,000 queued deltas"
    read = [queue.receive_nowait() for _ in range(5_000)]
    assert [(e.seq, e.ts, e.text) for e in read] == [(s, float(s), f"piece {s}") for s in range(1, 5_001)]


async def test_a_reader_waiting_is_woken_by_a_text_delta_taken_as_its_parts() -> None:
    queue = StreamQueue()
    queue.stamp("s", "r")
    got = await _read_one_offered_after_it_waits(queue, lambda: queue.offer_text("x", 1, 0.0))
    assert [(type(e), e.seq) for e in got] == [(TextDeltaEvent, 1)]


async def _read_to_the_end(queue: StreamQueue) -> None:
    with contextlib.suppress(trio.EndOfChannel):
        while True:
            await queue.receive()


async def _bytes_per_drained_queue(release: bool, queues: int = 200) -> float:
    """Traced bytes each queue holds once its reader has read one event and waits for the next."""
    made = [StreamQueue() for _ in range(queues)]
    for queue in made:
        queue.release_when_read(release)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        async with trio.open_nursery() as nursery:
            for queue in made:
                assert queue.offer(_event(1))
                nursery.start_soon(_read_to_the_end, queue)  # reads the event, then waits for the next
            await trio.testing.wait_all_tasks_blocked()
            held = (tracemalloc.get_traced_memory()[0] - before) / queues
            for queue in made:
                queue.close()
    finally:
        tracemalloc.stop()
    return held


async def test_a_drained_queue_keeps_its_buffer_while_the_request_runs_and_lets_it_go_while_it_waits() -> None:
    # Kept: a buffer made anew for every burst is a young object each collection traverses.
    kept = await _bytes_per_drained_queue(release=False)
    # Let go while the request waits for a person: a waiting request keeps no buffer.
    released = await _bytes_per_drained_queue(release=True)
    assert kept - released > 400, f"kept {kept:.0f} B, released {released:.0f} B per queue"


async def test_a_queue_released_while_its_reader_waits_takes_the_next_event_in_a_new_buffer() -> None:
    queue = StreamQueue(capacity=4)
    queue.stamp("s", "r")
    assert queue.offer(_event(1))
    assert queue.receive_nowait().seq == 1

    def release_then_offer() -> bool:
        queue.release_when_read(True)
        return queue.offer_text("x", 2, 0.0)

    got = await _read_one_offered_after_it_waits(queue, release_then_offer)
    assert [(type(e), e.seq) for e in got] == [(TextDeltaEvent, 2)]
    queue.release_when_read(False)
    assert queue.offer(_event(3))
    assert queue.receive_nowait().seq == 3

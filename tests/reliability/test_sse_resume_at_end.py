"""Resuming a finished run's stream at or after its last event is a 204, so an EventSource stops.

A stream ends after the run's terminal event; an EventSource then reconnects with the last id it
saw. An empty 200 there made it reconnect forever; a 204 is what the SSE specification has a
server say for "stop reconnecting". Resuming before the terminal event still replays it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from http_services import KINDS, service


class EventSourceLike:
    """Reconnects as the HTML EventSource does: a 200 event stream is read and, once it ends, asked
    for again with ``Last-Event-ID``; a 204 (or any other answer) ends the connection for good."""

    def __init__(self, http: httpx.AsyncClient, url: str, retry_seconds: float = 0.02) -> None:
        self.http = http
        self.url = url
        self.retry_seconds = retry_seconds
        self.last_event_id: str | None = None
        self.events: list[dict[str, Any]] = []
        self.answers: list[int] = []

    async def run(self) -> None:
        while True:
            headers = {"Accept": "text/event-stream"}
            if self.last_event_id is not None:
                headers["Last-Event-ID"] = self.last_event_id
            async with self.http.stream("GET", self.url, headers=headers) as response:
                self.answers.append(response.status_code)
                if response.status_code != 200:
                    return
                buffer = ""
                async for chunk in response.aiter_text():
                    buffer += chunk
                    while "\n\n" in buffer:
                        frame, buffer = buffer.split("\n\n", 1)
                        fields = dict(line.split(": ", 1) for line in frame.splitlines())
                        self.last_event_id = fields.get("id", self.last_event_id)
                        self.events.append(json.loads(fields["data"]))
            await trio.sleep(self.retry_seconds)


async def finished_run(http: httpx.AsyncClient, base: str, kind: str) -> tuple[str, list[str]]:
    """A run that has ended and its SSE frames: completed in-process; on a web node with no worker, cancelled."""
    started = await http.post(f"{base}/sessions/s/runs", json={"input": "hi"})
    assert started.status_code == 202, started.text
    request_id = started.json()["request_id"]
    if not kind.startswith("in-process"):
        cancelled = await http.post(f"{base}/runs/{request_id}/cancel")
        assert cancelled.status_code == 202, cancelled.text
    while not (await http.get(f"{base}/runs/{request_id}")).json()["done"]:
        await trio.sleep(0.02)
    whole = await http.get(f"{base}/runs/{request_id}/events")
    assert whole.status_code == 200, whole.text
    return request_id, whole.text.strip().split("\n\n")


def frame_seq(frame: str) -> int:
    return int(frame.splitlines()[0].removeprefix("id: "))


@pytest.mark.parametrize("kind", KINDS)
async def test_resuming_at_or_after_the_last_event_is_a_204_and_before_it_replays_the_end(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with trio.fail_after(60):
        async with service(kind, request, tmp_path) as base, httpx.AsyncClient(timeout=10) as http:
            request_id, frames = await finished_run(http, base, kind)
            terminal = frames[-1]
            assert "event: run_completed" in terminal or "event: run_cancelled" in terminal, terminal
            last = frame_seq(terminal)
            events = f"{base}/runs/{request_id}/events"
            for cursor in (last, last + 1, last + 1000):
                by_header = await http.get(events, headers={"Last-Event-ID": str(cursor)})
                by_query = await http.get(events, params={"after": cursor})
                for got in (by_header, by_query):
                    assert (got.status_code, got.content) == (204, b""), (cursor, got.status_code, got.text)
            before = await http.get(events, headers={"Last-Event-ID": str(last - 1)})
            assert before.status_code == 200, before.text
            assert before.headers["content-type"].startswith("text/event-stream")
            assert before.text.strip() == terminal
            # A run that does not exist is still a 404, whatever the cursor.
            missing = await http.get(f"{base}/runs/no-such-run/events", headers={"Last-Event-ID": str(last)})
            assert missing.status_code == 404, missing.text


@pytest.mark.parametrize("kind", KINDS)
async def test_an_eventsource_reading_a_finished_run_stops_after_one_reconnect(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with service(kind, request, tmp_path) as base, httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(30):
            request_id, frames = await finished_run(http, base, kind)
        source = EventSourceLike(http, f"{base}/runs/{request_id}/events")
        with trio.move_on_after(5) as waited:
            await source.run()
    assert not waited.cancelled_caught, f"still reconnecting after 5 s: {len(source.answers)} answers"
    assert source.answers == [200, 204], source.answers
    assert [event["seq"] for event in source.events] == [frame_seq(frame) for frame in frames]
    assert source.events[-1]["type"] in ("run_completed", "run_cancelled")

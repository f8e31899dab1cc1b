"""An SSE stream whose reader fell behind the retained events ends with a clean error frame, not a cut."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import trio

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.runtime.handle import EventsExpired
from orchestrator.server.backend import LocalBackend
from tests.server.support import serving


class FallsBehind(LocalBackend):
    """Serves a run's events, then finds the next ones expired (as a reader slower than the run would)."""

    def __init__(self, inner: LocalBackend, failure: Exception) -> None:
        super().__init__(inner.client)
        self.failure = failure

    async def events(self, request_id: str, after: int) -> AsyncIterator[list[dict[str, Any]]]:
        real = await super().events(request_id, after)
        failure = self.failure

        async def two_then_fail() -> AsyncIterator[list[dict[str, Any]]]:
            async for batch in real:
                yield batch[:2]
                raise failure

        return two_then_fail()


async def _stream(failure: Exception) -> tuple[int, list[str]]:
    client = await create_agent(ScriptedModel([AssistantMessage("hello")]))
    backend = FallsBehind(LocalBackend(client), failure)
    async with httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(20):
            async with serving(backend) as base:  # type: ignore[arg-type]
                started = await http.post(f"{base}/sessions/s/runs", json={"input": "hi"})
                request_id = started.json()["request_id"]
                async with http.stream("GET", f"{base}/runs/{request_id}/events") as response:
                    lines = [line async for line in response.aiter_lines()]
                return response.status_code, lines


def _frames(lines: list[str]) -> list[dict[str, str]]:
    frames, current = [], {}
    for line in lines:
        if not line:
            if current:
                frames.append(current)
            current = {}
            continue
        field, _, value = line.partition(": ")
        current[field] = value
    assert not current, f"a frame was cut off: {current}"
    return frames


async def test_a_reader_behind_the_retained_events_gets_a_final_error_frame() -> None:
    status, lines = await _stream(EventsExpired("r", 2, 40))
    frames = _frames(lines)
    assert status == 200
    assert [f.get("id") for f in frames] == ["1", "2", None]
    assert frames[-1]["event"] == "error"
    error = json.loads(frames[-1]["data"])
    assert error["type"] == "error"
    assert error["error"]["type"] == "EventsExpired"
    assert "no longer retained" in error["error"]["message"]


async def test_an_unexpected_failure_mid_stream_also_ends_with_an_error_frame() -> None:
    status, lines = await _stream(RuntimeError("the store went away"))
    frames = _frames(lines)
    assert status == 200
    assert frames[-1]["event"] == "error"
    assert '"RuntimeError"' in frames[-1]["data"] and "the store went away" in frames[-1]["data"]


class WithoutFollow:
    """A backend of the application's own that has no ``follow`` (everything else is a LocalBackend's)."""

    def __init__(self, inner: LocalBackend) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "follow":
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_backend_without_follow_still_streams_a_run_to_its_end() -> None:
    backend = WithoutFollow(LocalBackend(await create_agent(ScriptedModel([AssistantMessage("hello")]))))
    async with httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(20):
            async with serving(backend) as base:  # type: ignore[arg-type]
                started = await http.post(f"{base}/sessions/s/runs", json={"input": "hi"})
                request_id = started.json()["request_id"]
                async with http.stream("GET", f"{base}/runs/{request_id}/events") as response:
                    lines = [line async for line in response.aiter_lines()]
                missing = await http.get(f"{base}/runs/no-such-run/events")
    assert response.status_code == 200
    assert [frame["event"] for frame in _frames(lines)][-1] == "run_completed"
    assert missing.status_code == 404

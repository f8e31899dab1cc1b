"""Starting a run and following its events answer exactly as the router's routes do, on both hosts.

Those two routes are dispatched before Starlette's router; their refusals, their error answers and the
requests they do not take (another method, a trailing slash) must not tell the difference.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio

from orchestrator.store.errors import StoreUnavailable
from tests.server.support import Serving


class Failing:
    """A backend every call of which raises ``error`` (``running`` aside, which ``/health`` reads)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def running(self) -> int:
        return 0

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise self.error

        return fail


async def _ask(method: str, url: str, **options: Any) -> httpx.Response:
    """One request on a connection of its own (uvicorn closes the connection of a request that raised)."""
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.request(method, url, **options)


def _answer(response: httpx.Response) -> tuple[int, str, str | None, str | None]:
    return (
        response.status_code,
        response.text,
        response.headers.get("content-type"),
        response.headers.get("retry-after"),
    )


@pytest.mark.parametrize("error", [StoreUnavailable("the database is down"), RuntimeError("a bug")])
async def test_an_error_in_the_backend_is_answered_as_the_routers_routes_answer_it(
    serving: Serving, error: Exception
) -> None:
    with trio.fail_after(30):
        async with serving(Failing(error)) as base:
            started = await _ask("POST", f"{base}/sessions/s/runs", json={"input": "hi"})
            forked = await _ask("POST", f"{base}/sessions/s/fork", json={})  # the router's, same body read
            events = await _ask("GET", f"{base}/runs/r/events")
            shown = await _ask("GET", f"{base}/runs/r")  # the router's, same first backend call
    assert _answer(started) == _answer(forked)
    assert _answer(events) == _answer(shown)
    if isinstance(error, StoreUnavailable):
        assert started.status_code == 503 and started.headers["retry-after"] == "1"
        assert started.json() == {"error": {"type": "StoreUnavailable", "message": "the database is down"}}
    else:
        assert (started.status_code, started.text) == (500, "Internal Server Error")


async def test_refusals_of_the_two_routes_are_json_with_their_reason(serving: Serving) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(30):
            async with serving(Failing(RuntimeError("never reached")), max_body_bytes=64) as base:
                plain = {"content-type": "text/plain"}
                as_text = await http.post(f"{base}/sessions/s/runs", content=b"hi", headers=plain)
                too_big = await http.post(f"{base}/sessions/s/runs", json={"input": "x" * 100})
                bad_id = await http.post(f"{base}/sessions/%20/runs", json={"input": "hi"})
                bad_cursor = await http.get(f"{base}/runs/r/events", headers={"last-event-id": "x"})
    assert (as_text.status_code, as_text.json()["error"]["type"]) == (415, "UnsupportedMediaType")
    assert (too_big.status_code, too_big.json()["error"]["type"]) == (413, "PayloadTooLarge")
    assert (bad_id.status_code, bad_id.json()["error"]["type"]) == (400, "BadRequest")
    assert (bad_cursor.status_code, bad_cursor.json()["error"]["type"]) == (400, "BadRequest")


async def test_other_methods_and_paths_near_the_two_routes_still_reach_the_router(serving: Serving) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(30):
            async with serving(Failing(RuntimeError("never reached"))) as base:
                listed = await http.get(f"{base}/sessions/s/runs")
                posted = await http.post(f"{base}/runs/r/events", json={})
                deeper = await http.post(f"{base}/sessions/s/x/runs", json={"input": "hi"})
                empty = await http.get(f"{base}/runs//events")
    assert (listed.status_code, listed.json()["error"]["type"]) == (405, "MethodNotAllowed")
    assert (posted.status_code, posted.json()["error"]["type"]) == (405, "MethodNotAllowed")
    assert (deeper.status_code, deeper.json()["error"]["type"]) == (404, "NotFound")
    assert (empty.status_code, empty.json()["error"]["type"]) == (404, "NotFound")

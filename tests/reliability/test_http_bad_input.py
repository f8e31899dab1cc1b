"""Hostile input to the HTTP routes is a 400 with a JSON reason, on an in-process server and on a web node.

Before anything else could go wrong: JSON nested thousands deep (the decoder's RecursionError),
event cursors of digits ``int`` refuses (``Last-Event-ID: ²``) or that are not ASCII, and ids
holding NUL or other control characters (PostgreSQL refuses NUL in text; the in-process server
took them as they were). Every one gets the same answer from both kinds of server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from http_services import KINDS, service

MAX_JSON_DEPTH = 100  # the nesting a body may have (docs/serving/http.md)

JSON = {"content-type": "application/json"}
NUL_ID = "a%00b"  # a path segment that decodes to "a\x00b"


def nested(depth: int) -> str:
    """A run body whose ``input`` is ``depth`` - 1 arrays deep (the body object is one level more)."""
    return '{"input": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


async def post(http: httpx.AsyncClient, url: str, body: Any, headers: dict[str, Any] | None = None) -> httpx.Response:
    """POST ``body`` as JSON text with ASCII escapes (so a lone surrogate goes over the wire as ``\\ud800``)."""
    return await http.post(url, content=json.dumps(body), headers={**JSON, **(headers or {})})


def assert_refused(response: httpx.Response, *words: str) -> dict[str, Any]:
    """A 400 whose JSON body is ``{"error": {"type": "BadRequest", "message": ...}}`` with ``words`` in it."""
    where = f"{response.request.method} {response.request.url} -> {response.status_code} {response.text[:300]!r}"
    assert response.status_code == 400, where
    assert response.headers["content-type"].startswith("application/json"), where
    error = response.json()["error"]
    assert error["type"] == "BadRequest", where
    for word in words:
        assert word in error["message"], where
    return dict(error)


@pytest.mark.parametrize("kind", KINDS)
async def test_json_nested_too_deep_is_a_400_at_any_depth(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with trio.fail_after(90):
        async with service(kind, request, tmp_path) as base, httpx.AsyncClient(timeout=30) as http:
            for depth in (5_000, 100_000, MAX_JSON_DEPTH + 1):
                posted = await http.post(f"{base}/sessions/s/runs", content=nested(depth), headers=JSON)
                assert_refused(posted, "deeper than", str(MAX_JSON_DEPTH))
            deep_payload = json.loads('{"content": "x", "more": ' + "[" * 200 + "]" * 200 + "}")
            posted = await post(http, f"{base}/sessions/s/events", {"name": "steering", "payload": deep_payload})
            assert_refused(posted, "deeper than")
            # At the limit a body is read as usual (here: a list that is not content parts).
            at_limit = await http.post(f"{base}/sessions/s/runs", content=nested(MAX_JSON_DEPTH), headers=JSON)
            assert_refused(at_limit, "content parts")


@pytest.mark.parametrize("kind", KINDS)
async def test_event_cursors_are_ascii_digits_only(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with service(kind, request, tmp_path) as base, httpx.AsyncClient(timeout=30) as http:
            started = await http.post(f"{base}/sessions/s/runs", json={"input": "hi"})
            assert started.status_code == 202, started.text
            events = f"{base}/runs/{started.json()['request_id']}/events"
            for raw in ("²".encode("latin-1"), "¹²".encode("latin-1"), b"1\xb2", b"-1", b"1.5", b"0x10", b"1" * 19):
                got = await http.get(events, headers={"Last-Event-ID": raw})
                assert_refused(got, "Last-Event-ID", "whole number")
            for text in ("²", "٣", "١٢", "\U0001d7d9", "-1", "", "1e3"):
                got = await http.get(events, params={"after": text})
                assert_refused(got, "?after=", "whole number")


@pytest.mark.parametrize("kind", KINDS)
async def test_ids_with_control_characters_are_refused_before_any_store_sees_them(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    answer = {"name": "ask_user_response", "payload": {"tool_call_id": "q1", "answer": "yes"}}
    with trio.fail_after(90):
        async with service(kind, request, tmp_path) as base, httpx.AsyncClient(timeout=30) as http:
            for path in (NUL_ID, "a%0Ab", "a%7Fb", "a%C2%85b"):  # NUL, a line break, DEL, a C1 control (NEL)
                assert_refused(await post(http, f"{base}/sessions/{path}/runs", {"input": "hi"}), "session_id")
                assert_refused(await post(http, f"{base}/sessions/{path}/events", answer), "session_id")
                assert_refused(await http.get(f"{base}/sessions/{path}"), "session_id", "control character")
                for route in ("", "/events", "/trace"):
                    assert_refused(await http.get(f"{base}/runs/{path}{route}"), "request_id", "control character")
                assert_refused(await http.post(f"{base}/runs/{path}/cancel"), "request_id", "control character")
            for bad in ("a\x00b", "\x00", "line\nbreak", "tab\tin", "\ud800"):
                with_id = await post(http, f"{base}/sessions/s/runs", {"input": "hi", "request_id": bad})
                assert_refused(with_id, "'request_id'")
                to_run = await post(http, f"{base}/sessions/s/events", {**answer, "request_id": bad})
                assert_refused(to_run, "'request_id'")
                call_id = {**answer, "payload": {"tool_call_id": bad, "answer": "yes"}}
                assert_refused(await post(http, f"{base}/sessions/s/events", call_id), "'payload.tool_call_id'")
                named = await post(http, f"{base}/sessions/s/events", {**answer, "name": bad})
                assert_refused(named, "'name'")
            for key in (b"k\x85", b"\x9f", b"\x80x"):  # C1 controls: bytes an HTTP parser passes on (latin-1)
                keyed = await post(http, f"{base}/sessions/s/runs", {"input": "hi"}, {"Idempotency-Key": key})
                assert_refused(keyed, "Idempotency-Key", "control character")
            # Nothing refused reached a store: the service still answers, and no session was made.
            listed = await http.get(f"{base}/sessions")
            assert listed.status_code == 200, listed.text
            assert listed.json()["sessions"] == [], listed.text
            fine = await post(http, f"{base}/sessions/s-ok/runs", {"input": "hi", "request_id": "r-ok ünïcode"})
            assert fine.status_code == 202, fine.text

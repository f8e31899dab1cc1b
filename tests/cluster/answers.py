"""Answering a run's question for the cluster tests: over HTTP, as a client of a web node does, or into its inbox in
the store, as a web node does."""

from __future__ import annotations

import httpx

from orchestrator.cluster.checkpoint import read
from orchestrator.store.runs import NewInboxItem, RunRecord, RunStore
from tests.server.support import SSE, read_sse


async def answer_yes(
    http: httpx.AsyncClient, base: str, session_id: str, tool_call_id: str, *, key: str | None = None
) -> None:
    """Post "yes" to the question ``tool_call_id`` of the session's run through the web node ``base`` (with
    ``key`` as its Idempotency-Key); the node must take it (202)."""
    answered = await http.post(
        f"{base}/sessions/{session_id}/events",
        json={"name": "ask_user_response", "payload": {"tool_call_id": tool_call_id, "answer": "yes"}},
        headers={"Idempotency-Key": key} if key else {},
    )
    assert answered.status_code == 202, answered.text


async def parked_then_answered(http: httpx.AsyncClient, base: str, session_id: str, request_id: str) -> tuple[SSE, SSE]:
    """Follow the run's events through ``base`` until it parks, answer its question "yes", then follow the rest
    until the stream ends: (the events up to the park, the events after it)."""
    parked = await read_sse(http, f"{base}/runs/{request_id}/events", stop=lambda e: e["type"] == "run_parked")
    await answer_yes(http, base, session_id, parked.events[-1]["waiting"][0])
    rest = await read_sse(http, f"{base}/runs/{request_id}/events", last_event_id=parked.events[-1]["seq"])
    return parked, rest


def post_yes(store: RunStore, parked: RunRecord) -> list[str]:
    """Post "yes" into ``store`` to every question the parked run ``parked`` waits on, as a web node does; the ids of
    the calls answered (none when its row holds no checkpoint)."""
    checkpoint = read(parked.checkpoint)
    answered = []
    for wait in checkpoint.waiting if checkpoint is not None else ():
        payload = {"tool_call_id": wait.tool_call_id, "answer": "yes"}
        store.post(NewInboxItem(parked.session_id, parked.request_id, wait.response_event, payload))
        answered.append(wait.tool_call_id)
    return answered

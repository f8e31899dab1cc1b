"""Idle followers of parked runs cost the store (almost) nothing, and a new event still reaches every one.

Real pieces: a throwaway PostgreSQL (``tests/pg.py``), the run store, a web node
(``StoreBackend``) served by hypercorn, and 300 SSE followers over HTTP. The runs
are parked as a worker parks them (claimed, then committed ``parked`` with a
``run_parked`` event). While nothing happens, the database's own count of
committed transactions (``pg_stat_database``) barely moves and a POST run is
answered; then each run is cancelled (one transaction and one event each), and
every follower receives that event and sees its stream end.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import trio

from orchestrator import wire
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.events import RunCancelledEvent
from orchestrator.events.features import RunParkedEvent
from orchestrator.store.runs import RunCommit, StoredEvent
from orchestrator.store.runs_sql import postgres_run_store
from tests.server.support import read_sse, serving

FOLLOWERS = 300
QUIET_SECONDS = 4.0
INPUT = {"role": "user", "content": "hello"}


def _committed(dsn: str) -> int:
    """The database's count of committed transactions, once its backends had time to report them."""
    import psycopg

    time.sleep(1.5)  # a backend reports its counts at most once a second
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


async def test_idle_followers_of_parked_runs_make_no_transactions_and_still_get_new_events(postgres_dsn: str) -> None:
    store = postgres_run_store(postgres_dsn)
    try:
        for index in range(FOLLOWERS):
            store.create_run(f"s{index}", f"r{index}", INPUT)
        leases = store.claim("test-worker", 600.0, FOLLOWERS)
        assert len(leases) == FOLLOWERS
        for lease in leases:  # each asks a question and parks, as a worker's run does
            parked_event = RunParkedEvent(
                session_id=lease.session_id, request_id=lease.request_id, seq=1, ts=time.time(), waiting=("c1",)
            )
            stored = StoredEvent(lease.request_id, 1, parked_event.name, wire.encode_event(parked_event))
            store.commit(lease, RunCommit(events=(stored,), status="parked"))
        parked = {lease.request_id: lease.session_id for lease in leases}
        assert {record.status for record in store.runs()} == {"parked"}

        seen: dict[str, list[str]] = {}
        first_seen = trio.Semaphore(0)
        limits = httpx.Limits(max_connections=FOLLOWERS + 10, max_keepalive_connections=FOLLOWERS + 10)
        async with (
            serving(StoreBackend(store)) as base,  # type: ignore[arg-type]
            httpx.AsyncClient(timeout=120, limits=limits) as http,
        ):

            async def follow(request_id: str) -> None:
                async def note(event: dict[str, object]) -> None:
                    seen.setdefault(request_id, []).append(str(event["type"]))
                    if len(seen[request_id]) == 1:
                        first_seen.release()

                await read_sse(http, f"{base}/runs/{request_id}/events", on_event=note)

            async with trio.open_nursery() as followers:
                for request_id in parked:
                    followers.start_soon(follow, request_id)
                with trio.fail_after(120):
                    for _ in range(FOLLOWERS):
                        await first_seen.acquire()

                before = await trio.to_thread.run_sync(_committed, postgres_dsn)
                await trio.sleep(QUIET_SECONDS)
                after = await trio.to_thread.run_sync(_committed, postgres_dsn)
                # The counting query itself is a transaction; a poll per follower would be thousands.
                assert after - before <= 10, f"{after - before} transactions while {FOLLOWERS} followers idled"

                with trio.fail_after(10):  # answered, not stuck behind the followers
                    started = await http.post(f"{base}/sessions/another/runs", json={"input": "hi"})
                assert started.status_code == 202, started.text

                def cancel_all() -> None:
                    for request_id, session_id in parked.items():

                        def final_event(seq: int, request_id: str = request_id, session_id: str = session_id) -> Any:
                            event = RunCancelledEvent(session_id=session_id, request_id=request_id, seq=seq, ts=0.0)
                            return StoredEvent(request_id, seq, event.name, wire.encode_event(event))

                        store.cancel(request_id, final_event)

                await trio.to_thread.run_sync(cancel_all)
                followers.cancel_scope.deadline = trio.current_time() + 60  # every stream ends by itself before
        assert not followers.cancel_scope.cancelled_caught, "a stream did not end after its run's last event"
        for request_id in parked:
            assert seen[request_id] == ["run_parked", "run_cancelled"], (request_id, seen.get(request_id))
    finally:
        store.close()

"""``python -m orchestrator worker``: carry the runs of a run store with an application's agent.

    python -m orchestrator worker --app myapp.agents:agent --db postgresql://user@host/db

Without ``--app`` the worker runs the CLI's default agent (``--model``, the
filesystem tools on ``--root``, Plan Mode, ask_user). It runs until
stopped. SIGTERM drains it: it claims no more runs, lets the steps running
finish within ``--grace-seconds``, hands every run it holds back at its last
commit (another worker resumes it at once) and exits 0. Ctrl-C, or a second
signal, hands them back at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

import trio

from orchestrator.cli.signals import Shutdown
from orchestrator.cluster.worker import GRACE_SECONDS, LEASE_SECONDS, RETENTION_SECONDS, Worker
from orchestrator.store.errors import StoreUnavailable
from orchestrator.store.runs import RunStore

log = logging.getLogger("orchestrator.cluster")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    from orchestrator.providers.choice import MODEL_SPECS

    parser = argparse.ArgumentParser(prog="python -m orchestrator worker", description="Carry runs of a run store.")
    parser.add_argument("--db", required=True, help="the run store: postgresql://... or sqlite:///PATH")
    parser.add_argument("--app", help="MODULE:ATTR naming the application's Agent (or a callable returning one)")
    parser.add_argument("--model", help=f"without --app: scripted (default), {MODEL_SPECS}")
    parser.add_argument("--root", default=".", help="without --app: workspace of the filesystem tools")
    parser.add_argument("--name", help="this worker's name in leases (default host:pid:random)")
    parser.add_argument("--capacity", type=int, default=16, help="runs carried at once (default 16)")
    parser.add_argument("--lease-seconds", type=float, default=LEASE_SECONDS, help=f"default {LEASE_SECONDS:g}")
    parser.add_argument(
        "--retention-hours",
        type=float,
        default=RETENTION_SECONDS / 3600,
        help=f"ended runs and their events are pruned after this long (default {RETENTION_SECONDS / 3600:g})",
    )
    parser.add_argument(
        "--session-retention-hours",
        type=float,
        default=None,
        help="delete sessions idle this long (no run live or parked) with their runs and history (default: keep)",
    )
    parser.add_argument(
        "--grace-seconds",
        type=float,
        default=GRACE_SECONDS,
        help=f"at SIGTERM, how long running steps may finish before their runs are handed back"
        f" (default {GRACE_SECONDS:g})",
    )
    args = parser.parse_args(list(argv))
    if args.grace_seconds < 0:
        parser.error("--grace-seconds cannot be negative")
    if args.session_retention_hours is not None and args.session_retention_hours <= 0:
        parser.error("--session-retention-hours must be above 0")
    if args.app and args.model:
        parser.error("--app brings its own agent: --model does not apply")
    return args


async def _work(args: argparse.Namespace, shutdown: Shutdown) -> None:
    from orchestrator.store.runs_sql import open_run_store

    if args.app:
        from orchestrator.cli.apploader import load_agent

        client = await load_agent(args.app)
    else:
        from orchestrator.cluster.default_agent import default_worker_client

        client = await default_worker_client(args.model, args.root)
    store = await trio.to_thread.run_sync(open_run_store, args.db)
    worker = Worker(
        client,
        store,
        name=args.name,
        capacity=args.capacity,
        lease_seconds=args.lease_seconds,
        retention_seconds=args.retention_hours * 3600,
    )
    shutdown.drain = lambda: worker.drain(args.grace_seconds)
    shutdown.hurry = worker.stop_now
    async with trio.open_nursery() as nursery:
        if args.session_retention_hours is not None:
            nursery.start_soon(prune_idle_sessions, store, args.session_retention_hours * 3600)
        await nursery.start(worker.run)
        print(f"worker {worker.name} carrying runs of {store.where}", file=sys.stderr, flush=True)


async def prune_idle_sessions(store: RunStore, idle_seconds: float) -> None:
    """Delete sessions idle for ``idle_seconds`` now and every tenth of it (at most hourly); an outage skips a round."""
    while True:
        try:
            gone = await trio.to_thread.run_sync(store.prune_sessions, time.time() - idle_seconds)
        except StoreUnavailable as down:
            log.warning("no idle sessions pruned: %s", down)
        else:
            if gone:
                log.info("pruned %d idle sessions", len(gone))
        await trio.sleep(min(idle_seconds / 10, 3600.0))


def main(argv: Sequence[str]) -> int:
    from orchestrator.cli.apploader import AppSpecError
    from orchestrator.cli.signals import run_service

    args = parse(argv)
    shutdown = Shutdown()
    return run_service("worker", lambda: _work(args, shutdown), (AppSpecError, ValueError), shutdown=shutdown)

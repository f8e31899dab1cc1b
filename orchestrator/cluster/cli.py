"""``python -m orchestrator worker``: carry the runs of a run store with an application's agent.

    python -m orchestrator worker --app myapp.agents:agent --db postgresql://user@host/db

Without ``--app`` the worker runs the default agent (``--model``, the
filesystem tools on ``--root``, Plan Mode, ask_user, and the project
configuration of ``--project DIR`` when given). It runs until stopped.
SIGTERM drains it: it claims no more runs, lets the steps running finish
within ``--grace-seconds``, hands every run it holds back at its last commit
(another worker resumes it at once) and exits 0. Ctrl-C, or a second signal,
hands them back at once.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from orchestrator.cli.parsing import OneLineParser
from orchestrator.cli.signals import Shutdown
from orchestrator.cluster.worker import CAPACITY, GRACE_SECONDS, LEASE_SECONDS, RETENTION_SECONDS, Worker
from orchestrator.store.errors import StoreUnavailable
from orchestrator.store.runs import RunStore

if TYPE_CHECKING:
    from orchestrator.project.config import ProjectConfig

log = logging.getLogger("orchestrator.cluster")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    from orchestrator.providers.choice import MODEL_SPECS

    parser = OneLineParser(prog="python -m orchestrator worker", description="Carry runs of a run store.")
    parser.add_argument("--db", required=True, help="the run store: postgresql://... or sqlite:///PATH")
    parser.add_argument("--app", help="MODULE:ATTR naming the application's Agent (or a callable returning one)")
    parser.add_argument("--model", help=f"without --app: scripted (default), {MODEL_SPECS}")
    parser.add_argument("--root", default=".", help="without --app: workspace of the filesystem tools")
    parser.add_argument(
        "--project",
        metavar="DIR",
        help="without --app: read the project configuration of DIR (.orchestrator.toml, .mcp.json, AGENTS.md,"
        " skills); without it no project file is read",
    )
    parser.add_argument(
        "--trust-project", action="store_true", help="start the MCP servers the project's .mcp.json names"
    )
    parser.add_argument("--name", help="this worker's name in leases (default host:pid:random)")
    parser.add_argument("--capacity", type=int, default=CAPACITY, help=f"runs carried at once (default {CAPACITY})")
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
    if args.app and (args.model or args.project or args.trust_project):
        parser.error("--app brings its own agent: --model, --project and --trust-project do not apply")
    if args.trust_project and not args.project:
        parser.error("--trust-project needs --project DIR")
    return args


def project_config(args: argparse.Namespace) -> ProjectConfig:
    """The configuration of the default agent: the flags, the ``--project`` files (none without it), the user's."""
    from orchestrator.project.config import Flags, load_config

    return load_config(Flags(model=args.model, trust_project=args.trust_project), args.project)


async def _work(args: argparse.Namespace, config: ProjectConfig | None, shutdown: Shutdown) -> None:
    async with contextlib.AsyncExitStack() as stack:
        await _carry(args, config, shutdown, stack)


async def _carry(
    args: argparse.Namespace, config: ProjectConfig | None, shutdown: Shutdown, stack: contextlib.AsyncExitStack
) -> None:
    from orchestrator.store.runs_sql import open_run_store

    if config is None:
        from orchestrator.cli.apploader import load_agent

        client = await load_agent(args.app)
    else:
        from orchestrator.project.agent import open_default_agent, service_model

        built = await stack.enter_async_context(
            open_default_agent(config, service_model(config.model.value), root=args.root, surface="service")
        )
        client = built.client
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
        # What the process set up to carry runs (its modules, the agent, the store) lives as long as it does:
        # kept out of the collector's full passes, which then scan only what the runs made.
        gc.collect()
        gc.freeze()
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
    from orchestrator.project.agent import subagent_models
    from orchestrator.project.settings import ConfigError

    args = parse(argv)
    try:
        config = None if args.app else project_config(args)
        if config is not None:
            subagent_models(config)  # a subagent's model that cannot be used is refused before anything starts
    except ConfigError as error:  # a configuration file that cannot be used: said before anything starts
        print(f"worker: {error}", file=sys.stderr)
        return 2
    shutdown = Shutdown()
    return run_service(
        "worker", lambda: _work(args, config, shutdown), (AppSpecError, ValueError), shutdown=shutdown
    )

"""``python -m orchestrator worker``: carry the runs of a run store with an application's agent.

    python -m orchestrator worker --app myapp.agents:agent --db postgresql://user@host/db

Without ``--app`` the worker runs the default agent (``--model``, the
filesystem tools on ``--root``, Plan Mode, ask_user, and the project
configuration of ``--project DIR`` when given). It runs until
interrupted; its runs are taken over by other workers once their leases expire.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from orchestrator.cli.parsing import OneLineParser
from orchestrator.cluster.worker import LEASE_SECONDS, RETENTION_SECONDS, Worker

if TYPE_CHECKING:
    from orchestrator.project.config import ProjectConfig


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
    parser.add_argument("--capacity", type=int, default=16, help="runs carried at once (default 16)")
    parser.add_argument("--lease-seconds", type=float, default=LEASE_SECONDS, help=f"default {LEASE_SECONDS:g}")
    parser.add_argument(
        "--retention-hours",
        type=float,
        default=RETENTION_SECONDS / 3600,
        help=f"ended runs and their events are pruned after this long (default {RETENTION_SECONDS / 3600:g})",
    )
    args = parser.parse_args(list(argv))
    if args.app and (args.model or args.project or args.trust_project):
        parser.error("--app brings its own agent: --model, --project and --trust-project do not apply")
    if args.trust_project and not args.project:
        parser.error("--trust-project needs --project DIR")
    return args


def project_config(args: argparse.Namespace) -> ProjectConfig:
    """The configuration of the default agent: the flags, the ``--project`` files (none without it), the user's."""
    from orchestrator.project.config import Flags, load_config

    return load_config(Flags(model=args.model, trust_project=args.trust_project), args.project)


async def _work(args: argparse.Namespace, config: ProjectConfig | None) -> None:
    async with contextlib.AsyncExitStack() as stack:
        await _carry(args, config, stack)


async def _carry(args: argparse.Namespace, config: ProjectConfig | None, stack: contextlib.AsyncExitStack) -> None:
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
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        print(f"worker {worker.name} carrying runs of {store.where}", file=sys.stderr, flush=True)


def main(argv: Sequence[str]) -> int:
    from orchestrator.cli.apploader import AppSpecError
    from orchestrator.cli.signals import run_service
    from orchestrator.project.settings import ConfigError

    args = parse(argv)
    try:
        config = None if args.app else project_config(args)
    except ConfigError as error:  # a configuration file that cannot be used: said before anything starts
        print(f"worker: {error}", file=sys.stderr)
        return 2
    return run_service("worker", lambda: _work(args, config), (AppSpecError, ValueError))

"""``python -m orchestrator serve``: the service on hypercorn's trio worker.

Sessions are kept in SQLite (``--db``) unless ``--app`` brings the
application's own agent. The server binds 127.0.0.1 unless ``--host`` says
otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from orchestrator.server.backend import DEFAULT_RETAINED_RUNS

if TYPE_CHECKING:
    from hypercorn.config import Config

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_BACKLOG = 1024
"""Pending connections the listening socket queues (hypercorn's own default, 100, resets a larger burst)."""


@attrs.frozen
class ServeOptions:
    model: str | None
    db: str | None
    root: str
    host: str
    port: int
    token: str | None
    app: str | None
    backlog: int = DEFAULT_BACKLOG
    retained_runs: int = DEFAULT_RETAINED_RUNS


def parse(argv: Sequence[str]) -> ServeOptions:
    from orchestrator.providers.choice import MODEL_SPECS

    parser = argparse.ArgumentParser(prog="python -m orchestrator serve", description="Serve an agent over HTTP.")
    parser.add_argument("--model", help=f"scripted (default), {MODEL_SPECS}")
    parser.add_argument(
        "--db",
        help="session database (default: the user data directory); a run store URL (postgresql://... or"
        " sqlite:///PATH) makes this a web node that serves the runs workers carry",
    )
    parser.add_argument("--root", default=".", help="workspace of the filesystem tools")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)")
    parser.add_argument(
        "--token",
        default=os.environ.get("ORCHESTRATOR_TOKEN"),
        help="bearer token every route but /health needs (default $ORCHESTRATOR_TOKEN)",
    )
    parser.add_argument("--app", help="MODULE:ATTR naming the application's Agent (or a callable returning one)")
    parser.add_argument(
        "--backlog",
        type=_positive,
        default=DEFAULT_BACKLOG,
        help=f"connections the listening socket queues before accepting (default {DEFAULT_BACKLOG})",
    )
    parser.add_argument(
        "--retained-runs",
        type=_positive,
        default=DEFAULT_RETAINED_RUNS,
        help=f"finished runs that stay reachable (events, state, trace) before the oldest answer 404"
        f" (default {DEFAULT_RETAINED_RUNS}; a web node keeps runs in its run store instead)",
    )
    args = parser.parse_args(list(argv))
    from orchestrator.store.runs_sql import is_run_store_url

    web_node = bool(args.db) and is_run_store_url(args.db)
    if args.app and (args.model or (args.db and not web_node)):
        parser.error("--app brings its own agent: --model and a session --db do not apply")
    if web_node and args.model:
        parser.error("a web node runs no model: the workers do (python -m orchestrator worker)")
    if web_node and args.retained_runs != DEFAULT_RETAINED_RUNS:
        parser.error("a web node keeps runs in its run store: --retained-runs does not apply")
    return ServeOptions(
        args.model, args.db, args.root, args.host, args.port, args.token, args.app, args.backlog, args.retained_runs
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def hypercorn_config(options: ServeOptions) -> Config:
    """hypercorn's settings for ``options``: the bind address, the listen backlog, no logs."""
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"{options.host}:{options.port}"]
    config.backlog = options.backlog
    config.accesslog = None
    config.errorlog = None
    return config


async def serve(options: ServeOptions, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    from hypercorn.trio import serve as hypercorn_serve

    from orchestrator.server.app import create_app
    from orchestrator.server.backend import Backend, LocalBackend
    from orchestrator.server.default_agent import default_client
    from orchestrator.store.runs_sql import is_run_store_url, open_run_store

    backend: Backend
    if options.db and is_run_store_url(options.db):
        from orchestrator.cluster.webnode import StoreBackend

        backend = StoreBackend(await trio.to_thread.run_sync(open_run_store, options.db))
    elif options.app:
        from orchestrator.cli.apploader import load_agent

        backend = LocalBackend(await load_agent(options.app), retained_runs=options.retained_runs)
    else:
        client = await default_client(options.model, options.db, options.root)
        backend = LocalBackend(client, retained_runs=options.retained_runs)
    config = hypercorn_config(options)
    app = create_app(backend, token=options.token)

    async def announce(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await hypercorn_serve(app, config, task_status=task_status)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(announce)
        print(f"serving on {', '.join(binds)} (console at {binds[0]}/)", file=sys.stderr, flush=True)
        task_status.started(binds)


def main(argv: Sequence[str]) -> int:
    from orchestrator.cli.apploader import AppSpecError
    from orchestrator.store.errors import StoreError

    options = parse(argv)
    try:
        trio.run(serve, options)
    except AppSpecError as error:
        print(f"serve: {error}", file=sys.stderr)
        return 2
    except StoreError as error:  # the store named by --db cannot be opened
        print(f"serve: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0

"""``python -m orchestrator serve``: the service on hypercorn's trio worker.

Without ``--app`` it serves the default agent from the run store of an SQLite
file (``--db PATH``, by default the user data directory's) and carries its runs
in this process, so a run interrupted by a stop resumes by itself when ``serve``
starts again on the file. A run store URL makes it a web node (with ``--app``,
one that carries runs too); ``--app`` alone serves the application's agent in
memory. The server binds 127.0.0.1 unless ``--host`` says
otherwise, answers only to the bound name and the loopback names (plus
``--allow-host``), refuses state changes from other web origins (but
``--allow-origin``), and without ``--token`` generates one, printed once in the
console's URL (``--no-token`` serves without one).

SIGTERM drains it: a request that would start a run gets 503 with
``Retry-After``, the runs of this process that work (not those only waiting
for an answer) get ``--grace-seconds`` to finish, then open event streams end
with ``event: closing`` and the server exits 0. Ctrl-C, or a second signal,
skips the wait.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from orchestrator.cli.parsing import OneLineParser, port_number
from orchestrator.server.backend import DEFAULT_RETAINED_RUNS
from orchestrator.server.drain import DEFAULT_GRACE_SECONDS
from orchestrator.server.hosts import LOOPBACK_NAMES, AllowedHost
from orchestrator.server.origins import normalized_origin
from orchestrator.store.retention import Retention

if TYPE_CHECKING:
    from hypercorn.config import Config

    from orchestrator.agent import AgentClient
    from orchestrator.cluster.worker import Worker
    from orchestrator.project.config import ProjectConfig
    from orchestrator.store.runs_sql import SQLRunStore

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
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    token_generated: bool = False
    project: str | None = None
    trust_project: bool = False
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    retention: Retention | None = None
    """What the server prunes while it runs (None: nothing)."""
    stopped: list[int] = attrs.field(factory=list, eq=False, repr=False)
    """The signal that stopped the server, once one did (SIGINT or SIGTERM)."""

    @property
    def hosts(self) -> tuple[str, ...]:
        """The Host names served: the bound address, the loopback names, and the ones ``--allow-host`` adds."""
        return tuple(dict.fromkeys([self.host, *LOOPBACK_NAMES, *self.allowed_hosts]))


def parse(argv: Sequence[str]) -> ServeOptions:
    from orchestrator.providers.choice import MODEL_SPECS

    parser = OneLineParser(prog="python -m orchestrator serve", description="Serve an agent over HTTP.")
    parser.add_argument("--model", help=f"scripted (default), {MODEL_SPECS}")
    parser.add_argument(
        "--db",
        help="SQLite file whose run store keeps the default agent's runs and sessions, carried by this process"
        " (default: the user data directory); a run store URL (postgresql://... or sqlite:///PATH) makes this a"
        " web node that serves the runs workers carry (with --app, it carries runs itself too)",
    )
    parser.add_argument("--root", default=".", help="workspace of the filesystem tools")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)"
    )
    tokens = parser.add_mutually_exclusive_group()
    tokens.add_argument(
        "--token",
        help="bearer token every route but /health and the console's files needs (default $ORCHESTRATOR_TOKEN,"
        " else one generated and printed in the console's URL)",
    )
    tokens.add_argument(
        "--no-token",
        action="store_true",
        help="serve without a token: anyone who can reach the port (any user of a shared machine) drives the agent",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer to Host NAME (or NAME:PORT; * for any), e.g. the name of a public bind or of a proxy"
        " (default: the --host address, localhost, 127.0.0.1, [::1])",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let web pages of ORIGIN (scheme://host[:port]) call the API, with CORS answers"
        " (default: only the server's own pages)",
    )
    parser.add_argument(
        "--app",
        help="MODULE:ATTR naming the application's Agent (or a callable returning one); with a run store --db,"
        " the web node carries runs with it as a worker does",
    )
    parser.add_argument(
        "--project",
        metavar="DIR",
        help="read the project configuration of DIR (.orchestrator.toml, .mcp.json, AGENTS.md, skills); without"
        " it no project file is read",
    )
    parser.add_argument(
        "--trust-project", action="store_true", help="start the MCP servers the project's .mcp.json names"
    )
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
        help=f"with --app alone: finished runs that stay reachable (events, state, trace) before the oldest answer"
        f" 404 (default {DEFAULT_RETAINED_RUNS}; otherwise runs are kept in the run store)",
    )
    parser.add_argument(
        "--grace-seconds",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        help=f"at SIGTERM, how long runs that work may finish before the server stops"
        f" (default {DEFAULT_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "--retention-hours",
        type=float,
        default=None,
        help="prune ended runs (their events and state) this long after they ended (default: keep; in one"
        " process --retained-runs still bounds them)",
    )
    parser.add_argument(
        "--session-retention-hours",
        type=float,
        default=None,
        help="delete sessions idle this long, with their runs and history; a session with a run queued, running"
        " or waiting stays (default: keep)",
    )
    args = parser.parse_args(list(argv))
    if args.grace_seconds < 0:
        parser.error("--grace-seconds cannot be negative")
    ages = {"--retention-hours": args.retention_hours, "--session-retention-hours": args.session_retention_hours}
    for flag, hours in ages.items():
        if hours is not None and not hours > 0:
            parser.error(f"{flag} must be above 0, got {hours:g}")
    retention = None
    if args.retention_hours is not None or args.session_retention_hours is not None:
        retention = Retention.hours(args.retention_hours, args.session_retention_hours)
    from orchestrator.store.runs_sql import is_run_store_url

    web_node = bool(args.db) and is_run_store_url(args.db)
    if args.app and (args.model or (args.db and not web_node)):
        parser.error("--app brings its own agent: --model and a --db path do not apply (a run store URL does)")
    if (args.app or web_node) and (args.project or args.trust_project):
        parser.error("--project and --trust-project configure the default agent: not with --app or a run store")
    if args.trust_project and not args.project:
        parser.error("--trust-project needs --project DIR")
    if web_node and args.model:
        parser.error("a web node runs no model: the workers do (python -m orchestrator worker)")
    if web_node and args.retained_runs != DEFAULT_RETAINED_RUNS:
        parser.error("a web node keeps runs in its run store: --retained-runs does not apply")
    if not args.app and args.retained_runs != DEFAULT_RETAINED_RUNS:
        parser.error("the default agent keeps runs in the run store of its --db file: --retained-runs does not apply")
    for name in args.allow_host:
        if name.strip() != "*":
            try:
                AllowedHost.parse(name)
            except ValueError as error:
                parser.error(f"--allow-host: {error}")
    for origin in args.allow_origin:
        try:
            normalized_origin(origin)
        except ValueError as error:
            parser.error(f"--allow-origin: {error}")
    token = None if args.no_token else args.token or os.environ.get("ORCHESTRATOR_TOKEN") or None
    generated = token is None and not args.no_token
    if generated:
        token = secrets.token_urlsafe(32)
    return ServeOptions(
        args.model,
        args.db,
        args.root,
        args.host,
        args.port,
        token,
        args.app,
        args.backlog,
        args.retained_runs,
        tuple(args.allow_host),
        tuple(args.allow_origin),
        generated,
        args.project,
        args.trust_project,
        args.grace_seconds,
        retention,
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


def project_config(options: ServeOptions) -> ProjectConfig:
    """The configuration of the default agent: the flags, the ``--project`` files (none without it), the user's."""
    from orchestrator.project.config import Flags, load_config

    return load_config(Flags(model=options.model, trust_project=options.trust_project), options.project)


async def serve(
    options: ServeOptions,
    *,
    config: ProjectConfig | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        await _serve(options, config, stack, task_status)


async def _serve(
    options: ServeOptions,
    project: ProjectConfig | None,
    stack: contextlib.AsyncExitStack,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    from hypercorn.trio import serve as hypercorn_serve

    from orchestrator.server.app import create_app
    from orchestrator.server.backend import Backend, LocalBackend
    from orchestrator.server.drain import Drain, busy_runs
    from orchestrator.store.runs_sql import is_run_store_url

    backend: Backend
    worker: Worker | None = None
    if options.db and is_run_store_url(options.db):
        from orchestrator.cluster.webnode import StoreBackend

        backend = StoreBackend(await _opened(stack, options.db))
        if options.app:
            # A web node with the application's agent carries runs from the store too, as a worker does.
            from orchestrator.cli.apploader import load_agent

            worker = await _carrier(stack, options.db, await load_agent(options.app))
    elif options.app:
        from orchestrator.cli.apploader import load_agent

        backend = LocalBackend(await load_agent(options.app), retained_runs=options.retained_runs)
    else:
        # The default agent keeps its runs in the run store of the SQLite file, served and carried here:
        # a run interrupted by a stop resumes by itself when serve starts again on the file.
        from orchestrator.cluster.webnode import StoreBackend
        from orchestrator.project.agent import open_default_agent, service_model
        from orchestrator.providers.choice import default_db
        from orchestrator.store.sqlite import sessions_with_recorded_waits

        path = options.db or default_db()
        agent_config = project if project is not None else project_config(options)
        built = await stack.enter_async_context(
            open_default_agent(
                agent_config, service_model(agent_config.model.value), root=options.root, surface="service"
            )
        )
        backend = StoreBackend(await _opened(stack, path))
        worker = await _carrier(stack, path, built.client)
        left = await trio.to_thread.run_sync(sessions_with_recorded_waits, path)
        if left:  # the run store does not take answers to the session store's waits: chat does
            print(_left_waiting(left), file=sys.stderr, flush=True)
    config = hypercorn_config(options)
    stopped = options.stopped
    drain = Drain()
    app = create_app(
        backend,
        token=options.token,
        allowed_hosts=options.hosts,
        allowed_origins=options.allowed_origins,
        stop_streams=lambda: "the server is shutting down" if closing else None,
        drain=drain,
        grace_seconds=0,  # serve drains at SIGTERM itself, before hypercorn's shutdown runs the lifespan's
        retention=options.retention,
    )
    closing: list[bool] = []
    # The signals are received from before the server starts: a Ctrl-C just after it is ready must not reach
    # hypercorn as a KeyboardInterrupt raised in its own code, which it takes for a shutdown of its own.
    on_main_thread = threading.current_thread() is threading.main_thread()
    receiving = trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) if on_main_thread else None
    with receiving if receiving is not None else contextlib.nullcontext() as signals:
        async def on_signal() -> None:
            """Returns at SIGINT, or at SIGTERM once drained: hypercorn then ends gracefully, its open streams
            with ``event: closing``."""
            assert signals is not None
            first = await signals.__anext__()
            stopped.append(first)
            if first == signal.SIGTERM:
                drain.begin()
                print(f"serve: draining (up to {options.grace_seconds:g} s)", file=sys.stderr, flush=True)
                async with trio.open_nursery() as waiting:

                    async def hurried() -> None:
                        await signals.__anext__()
                        if worker is not None:
                            worker.stop_now()
                        waiting.cancel_scope.cancel()

                    waiting.start_soon(hurried)
                    if worker is not None:
                        await worker.drain(options.grace_seconds)  # hands back what is still held
                    with trio.move_on_after(options.grace_seconds):
                        while busy_runs(backend):
                            await trio.sleep(0.05)
                    waiting.cancel_scope.cancel()
            elif worker is not None:
                worker.stop_now()  # Ctrl-C: every held run goes back at its last commit, at once
            closing.append(True)

        trigger = on_signal if signals is not None else None

        async def announce(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await hypercorn_serve(app, config, shutdown_trigger=trigger, task_status=task_status)  # type: ignore[arg-type]
            finally:
                if worker is not None:
                    worker.stop_now()  # however the server ended, the process does not stay on as a worker

        async with trio.open_nursery() as nursery:
            if worker is not None:
                await nursery.start(worker.run)
            binds = await nursery.start(announce)
            console = console_url(binds[0], options)
            carrying = f", carrying runs as worker {worker.name}" if worker is not None else ""
            print(f"serving on {', '.join(binds)} (console at {console}){carrying}", file=sys.stderr, flush=True)
            task_status.started(binds)


async def _opened(stack: contextlib.AsyncExitStack, where: str) -> SQLRunStore:
    """The run store ``where`` names (a URL, or an SQLite file's path), closed when ``stack`` is."""
    from orchestrator.cluster.one_process import run_store_for

    store = await trio.to_thread.run_sync(run_store_for, where)
    stack.callback(store.close)
    return store


async def _carrier(stack: contextlib.AsyncExitStack, where: str, client: AgentClient) -> Worker:
    """A worker carrying the runs of ``where`` with ``client``'s agent (on an SQLite file it takes over at once the
    runs of this machine's carriers that are gone, a serve killed included)."""
    from orchestrator.cluster.worker import Worker

    return Worker(client, await _opened(stack, where))


def _left_waiting(session_ids: Sequence[str]) -> str:
    """The one line naming the sessions with waits the session store recorded, which ``chat`` answers."""
    shown = ", ".join(session_ids[:5]) + (f" and {len(session_ids) - 5} more" if len(session_ids) > 5 else "")
    return (
        f"serve: {len(session_ids)} session(s) wait for answers recorded by chat or an earlier serve ({shown}):"
        " answer them with python -m orchestrator chat --session ID"
    )


def console_url(base: str, options: ServeOptions) -> str:
    """The console's address; a generated token rides in it (the console keeps it and drops it from the URL)."""
    if options.token_generated and options.token is not None:
        return f"{base}/?access_token={options.token}"
    return f"{base}/"


def _web_node(options: ServeOptions) -> bool:
    from orchestrator.store.runs_sql import is_run_store_url

    return bool(options.db) and is_run_store_url(options.db or "")


def main(argv: Sequence[str]) -> int:
    from orchestrator.cli.apploader import AppSpecError
    from orchestrator.cli.signals import Stopped, run_service
    from orchestrator.project.agent import subagent_models
    from orchestrator.project.settings import ConfigError

    options = parse(argv)
    try:
        config = None if options.app or _web_node(options) else project_config(options)
        if config is not None:
            subagent_models(config)  # a subagent's model that cannot be used is refused before anything starts
    except ConfigError as error:  # a configuration file that cannot be used: said before anything starts
        print(f"serve: {error}", file=sys.stderr)
        return 2
    stopped = Stopped()

    async def body() -> None:
        await serve(options, config=config)
        if options.stopped:  # hypercorn ended gracefully at this signal
            stopped.signal = options.stopped[0]
            stopped.drained = stopped.signal == signal.SIGTERM

    # serve handles SIGINT and SIGTERM itself (hypercorn's graceful end, its open streams closed
    # with ``event: closing``); a press before its receiver is open still ends it in one line.
    return run_service("serve", body, (AppSpecError,), stopped=stopped, signals=())

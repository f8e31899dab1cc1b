"""``python -m orchestrator {demo,diagrams,schema,run,chat,sessions,config,serve,worker}``."""

from __future__ import annotations

import sys

INTERRUPTED_EXIT = 130
"""The exit code of a command Ctrl-C ended (128 + SIGINT, as a shell reports it)."""
COMMANDS = {
    "demo": "run a scripted request and print its events and state machine path",
    "run": "answer one prompt with a model, in the terminal",
    "chat": "talk with an agent in the terminal, session by session",
    "sessions": "list, show, title, export, fork or delete the terminal's stored sessions",
    "config": "print the configuration in force here and where each value came from",
    "serve": "serve the HTTP service and its browser console (hypercorn)",
    "worker": "carry the runs of a run store for web nodes (serve --db)",
    "diagrams": "write (or --check) the committed state machine diagrams",
    "schema": "write (or --check) the JSON Schema of the wire format",
}
"""Each subcommand and its line in ``--help``."""

EXTRA_OF_MODULE = {
    "starlette": "server",
    "hypercorn": "server",
    "uvicorn": "asgi",
    "rich": "cli",
    "httpx": "providers",
    "psycopg": "postgres",
    "mcp": "mcp",
}
"""The optional modules a subcommand may need, and the extra that installs each."""


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {line}" for name, line in COMMANDS.items()]
    return "\n".join(
        [
            "usage: python -m orchestrator COMMAND [options]",
            "",
            "commands:",
            *lines,
            "",
            "python -m orchestrator COMMAND --help describes a command's options.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "help"
    try:
        return _command(command, args)
    except KeyboardInterrupt:  # Ctrl-C before the command handles it (while it starts)
        print(f"{command}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    except ModuleNotFoundError as missing:
        module = (missing.name or "").partition(".")[0]
        if module not in EXTRA_OF_MODULE:
            raise
        extra = EXTRA_OF_MODULE[module]
        print(f"{command} needs {module}, which is not installed: pip install 'orchestrator[{extra}]'", file=sys.stderr)
        return 2


def _command(command: str, args: list[str]) -> int:
    if command == "demo":
        from orchestrator.cli.demo import main as demo

        demo()
        return 0
    if command == "diagrams":
        from orchestrator.observe.diagrams import main as diagrams

        return diagrams(args[1:])
    if command == "schema":
        from orchestrator.wire.schema import main as schema

        return schema(args[1:])
    if command == "serve":
        from orchestrator.server.serve import main as serve

        return serve(args[1:])
    if command == "worker":
        from orchestrator.cluster.cli import main as worker

        return worker(args[1:])
    if command == "config":
        from orchestrator.cli.show_config import main as show_config

        return show_config(args[1:])
    if command in ("run", "chat", "sessions"):
        from orchestrator.cli import command as cli

        return cli(command, args[1:])
    if command in ("help", "-h", "--help"):
        print(usage())
        return 0
    print(f"unknown command {command!r}\n{usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

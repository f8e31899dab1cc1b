"""``python -m orchestrator {demo,diagrams,schema,run,chat,sessions,config,serve,worker}``."""

from __future__ import annotations

import sys

INTERRUPTED_EXIT = 130
"""The exit code of a command Ctrl-C ended (128 + SIGINT, as a shell reports it)."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "help"
    try:
        return _command(command, args)
    except KeyboardInterrupt:  # Ctrl-C before the command handles it (while it starts)
        print(f"{command}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT


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
    commands = "demo,diagrams,schema,run,chat,sessions,config,serve,worker"
    print(f"usage: python -m orchestrator {{{commands}}} [options]", file=sys.stderr)
    return 0 if command in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())

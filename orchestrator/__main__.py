"""``python -m orchestrator {demo,diagrams,schema,run,chat,sessions,config,serve,worker}``."""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

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
    """Run the command ``argv`` names; whatever ends it is one line on stderr, never a traceback."""
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "help"
    try:
        return _command(command, args)
    except ModuleNotFoundError as missing:
        module = (missing.name or "").partition(".")[0]
        if module not in EXTRA_OF_MODULE:
            return _failed(command, missing)
        extra = EXTRA_OF_MODULE[module]
        print(f"{command} needs {module}, which is not installed: pip install 'orchestrator[{extra}]'", file=sys.stderr)
        return 2
    except (Exception, KeyboardInterrupt, BaseExceptionGroup) as error:
        return _failed(command, error)


def sole_error(error: BaseException) -> BaseException:
    """The one error inside (nested) exception groups that hold only it; otherwise ``error`` itself."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _failed(command: str, error: BaseException) -> int:
    """Say in one line why ``command`` ended with ``error``; its exit status.

    Ctrl-C is ``COMMAND: interrupted`` (130); an error of the operating system (a file that cannot be
    written, a port in use) names the reason and the file (1); anything else names its type and message
    (1), and ``ORCHESTRATOR_TRACEBACK=1`` shows its traceback instead.
    """
    leaf = sole_error(error)
    if isinstance(leaf, KeyboardInterrupt) or (
        isinstance(error, BaseExceptionGroup) and error.split(KeyboardInterrupt)[1] is None
    ):  # Ctrl-C before the command handles it (while it starts)
        print(f"{command}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    if isinstance(leaf, OSError) and leaf.strerror:
        where = f": {leaf.filename}" if leaf.filename is not None else ""
        print(f"{command}: {leaf.strerror}{where}", file=sys.stderr)
        return 1
    if os.environ.get("ORCHESTRATOR_TRACEBACK"):
        raise error
    reason = " ".join(str(leaf).split()) or "(no message)"
    print(f"{command}: {type(leaf).__name__}: {reason} (ORCHESTRATOR_TRACEBACK=1 shows where)", file=sys.stderr)
    return 1


def _command(command: str, args: list[str]) -> int:
    if command == "demo":
        from orchestrator.cli.demo import main as demo

        return demo(args[1:])
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
    print(f"unknown command {command!r}: use one of {', '.join(COMMANDS)} (--help describes them)", file=sys.stderr)
    return 2


def run_as_script() -> NoReturn:
    """``main``, then exit with its status. Once ``main`` returns, a Ctrl-C has nothing left to stop: SIGINT is
    ignored from then on, and one that arrives before (a signal delivered late, after the command had already
    said why it ended) gives the same status, 130, instead of killing the interpreter on its way out."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = INTERRUPTED_EXIT
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    _forget_escaped_interrupt()
    sys.exit(code)


def _forget_escaped_interrupt() -> None:
    """CPython remembers a KeyboardInterrupt that escaped code it ran from a string (``exec`` of generated code,
    as dataclasses and namedtuple do while modules import), even one caught later, and kills a ``-m`` program
    with SIGINT at exit for it. Running a string that ends normally clears that memory: the interrupt was
    handled, and the status ``main`` chose stands."""
    exec("pass")


if __name__ == "__main__":
    run_as_script()

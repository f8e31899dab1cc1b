"""Command lines of ``run``, ``chat`` and ``sessions``, parsed into Options."""

from __future__ import annotations

import argparse
import math
import os
import sys

import attrs

from orchestrator.cli.parsing import OneLineParser, tool_pattern
from orchestrator.extensions.files.sandbox import DEFAULT_LEVEL, SANDBOX_LEVELS, SandboxLevel
from orchestrator.limits import UsageLimits
from orchestrator.providers.choice import MODEL_SPECS, default_db, names_a_provider

MODEL_HELP = f"{MODEL_SPECS} (default: the scripted model, which needs no key)"


@attrs.frozen
class Options:
    """A parsed ``run`` or ``chat`` command line."""

    prompt: str | None = None
    model: str | None = None  # None: the scripted model
    session: str | None = None
    continue_last: bool = False
    plan_mode: bool = False
    root: str = "."
    db: str = attrs.field(factory=default_db)
    trace: bool = False
    json: bool = False
    yes: bool = False
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    scripted_delay: float = 3.0
    sandbox: SandboxLevel = DEFAULT_LEVEL
    sandbox_network: bool = False
    project: str | None = None  # the folder whose project files are read (None: none)
    trust_project: bool = False
    usage_limits: UsageLimits | None = None  # --max-requests, --max-tool-calls, --max-tokens (each request)
    deadline: float | None = None  # --deadline: seconds each request may run


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help=MODEL_HELP)
    parser.add_argument("--session", help="continue this stored session (a new one is created otherwise)")
    parser.add_argument("-c", "--continue", dest="continue_last", action="store_true", help="continue the last session")
    parser.add_argument("--plan-mode", action="store_true", help="plan first: the model proposes Plan Mode")
    parser.add_argument("--root", default=".", help="workspace of the filesystem tools and bash (default: .)")
    parser.add_argument("--db", help="session database (default: $XDG_DATA_HOME/orchestrator/sessions.db)")
    parser.add_argument("--trace", action="store_true", help="show every state machine transition")
    parser.add_argument("--json", action="store_true", help="print the events as JSON, one object per line")
    parser.add_argument("--yes", action="store_true", help="allow every tool without asking")
    parser.add_argument(
        "--allow", action="append", type=tool_pattern, default=[], metavar="TOOL", help="allow TOOL (a name or pattern)"
    )
    parser.add_argument(
        "--deny", action="append", type=tool_pattern, default=[], metavar="TOOL", help="deny TOOL (a name or pattern)"
    )
    parser.add_argument(
        "--sandbox",
        choices=SANDBOX_LEVELS,
        default=DEFAULT_LEVEL,
        help=f"how far bash is confined, with bwrap (default: {DEFAULT_LEVEL}; read-only also refuses write_file and "
        "edit_file)",
    )
    parser.add_argument(
        "--sandbox-network", action="store_true", help="let bash reach the network inside its sandbox"
    )
    parser.add_argument(
        "--trust-project",
        action="store_true",
        help="start the MCP servers the project's .mcp.json names (untrusted, they are listed but not started)",
    )
    parser.add_argument(
        "--max-requests", type=int, metavar="N", help="end a request that would make more than N model calls"
    )
    parser.add_argument(
        "--max-tool-calls", type=int, metavar="N", help="end a request that would run more than N tool calls"
    )
    parser.add_argument(
        "--max-tokens", type=int, metavar="N", help="end a request once its model calls used more than N tokens"
    )
    parser.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="end a request that runs longer than this (time waiting for your answers not counted)",
    )
    parser.add_argument(
        "--scripted-delay",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="how long the scripted model's slow_step tool takes (default 3)",
    )


def _check_session_id(parser: argparse.ArgumentParser, session: str | None) -> None:
    """A session id from the command line (bytes that are not UTF-8 arrive as lone surrogates)."""
    if session is not None and not session.isascii():
        try:
            session.encode("utf-8")
        except UnicodeEncodeError:
            parser.error(f"the session id {session!r} is not valid UTF-8")


def _options(parser: argparse.ArgumentParser, args: argparse.Namespace, prompt: str | None) -> Options:
    _check_session_id(parser, args.session)
    if args.model is not None and not names_a_provider(args.model):
        parser.error(f"unknown --model {args.model!r}: use {MODEL_SPECS} (or leave it out)")
    if args.session and args.continue_last:
        parser.error("--session and -c/--continue exclude each other")
    if not os.path.isdir(args.root):
        parser.error(f"--root {args.root!r} is not a directory")
    if args.scripted_delay < 0:
        parser.error("--scripted-delay must not be negative")
    for flag, value in (("--max-requests", args.max_requests), ("--max-tool-calls", args.max_tool_calls)):
        if value is not None and value < 0:
            parser.error(f"{flag} must not be negative, got {value}")
    if args.max_tokens is not None and args.max_tokens < 0:
        parser.error(f"--max-tokens must not be negative, got {args.max_tokens}")
    if args.deadline is not None and not (0 < args.deadline < math.inf):
        parser.error(f"--deadline must be a number of seconds above 0, got {args.deadline:g}")
    limits = (args.max_requests, args.max_tool_calls, args.max_tokens)
    usage_limits = (
        UsageLimits(requests=args.max_requests, tool_calls=args.max_tool_calls, total_tokens=args.max_tokens)
        if any(limit is not None for limit in limits)
        else None
    )
    return Options(
        prompt=prompt,
        model=args.model,
        session=args.session,
        continue_last=args.continue_last,
        plan_mode=args.plan_mode,
        root=args.root,
        db=args.db or default_db(),
        trace=args.trace,
        json=args.json,
        yes=args.yes,
        allow=tuple(args.allow),
        deny=tuple(args.deny),
        scripted_delay=args.scripted_delay,
        sandbox=args.sandbox,
        sandbox_network=args.sandbox_network,
        project=os.getcwd(),
        trust_project=args.trust_project,
        usage_limits=usage_limits,
        deadline=args.deadline,
    )


def parse(argv: list[str]) -> Options:
    """``run "PROMPT" [options]``."""
    parser = OneLineParser(prog="python -m orchestrator run", description="Run one request.")
    parser.add_argument("prompt", help="the user input")
    _common(parser)
    args = parser.parse_args(argv)
    if not args.prompt.strip():
        sys.stderr.write("run: error: the prompt is empty; give the request to send as PROMPT\n")
        raise SystemExit(2)
    return _options(parser, args, args.prompt)


def parse_chat(argv: list[str]) -> Options:
    """``chat [options]``."""
    parser = OneLineParser(prog="python -m orchestrator chat", description="An interactive session.")
    _common(parser)
    args = parser.parse_args(argv)
    return _options(parser, args, None)


@attrs.frozen
class SessionsCommand:
    """A parsed ``sessions list|show ID|delete ID``."""

    action: str
    session: str | None
    db: str
    argument: str | None = None  # export's FILE, title's TEXT, fork's new id
    turn: int | None = None  # fork: up to this turn


def parse_sessions(argv: list[str]) -> SessionsCommand:
    parser = OneLineParser(prog="python -m orchestrator sessions", description="Stored sessions.")
    parser.add_argument("--db", help="session database (default: $XDG_DATA_HOME/orchestrator/sessions.db)")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the stored sessions, latest first")
    listing.add_argument("--db", dest="sub_db", help=argparse.SUPPRESS)
    subs = {}
    for name, text in (
        ("show", "one session's messages"),
        ("delete", "delete one session"),
        ("title", "show a session's title, or set it"),
        ("export", "write a session to a file: .html for a web page, else Markdown"),
        ("fork", "copy a session into a new one (up to --turn N)"),
    ):
        sub = subs[name] = actions.add_parser(name, help=text)
        sub.add_argument("session", help="the session id")
        sub.add_argument("--db", dest="sub_db", help=argparse.SUPPRESS)
    subs["title"].add_argument("argument", nargs="?", metavar="TEXT", help="the new title")
    subs["export"].add_argument("argument", metavar="FILE", help="where to write it (.md or .html)")
    subs["fork"].add_argument("--as", dest="argument", metavar="NEW_ID", help="the new session's id (default: made)")
    subs["fork"].add_argument("--turn", type=int, help="copy only the first N turns")
    args = parser.parse_args(argv)
    _check_session_id(parser, getattr(args, "session", None))
    _check_session_id(parser, getattr(args, "argument", None) if args.action == "fork" else None)
    return SessionsCommand(
        args.action,
        getattr(args, "session", None),
        args.sub_db or args.db or default_db(),
        getattr(args, "argument", None),
        getattr(args, "turn", None),
    )

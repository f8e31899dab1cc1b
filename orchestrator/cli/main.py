"""Entry points of ``python -m orchestrator run|chat|sessions``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import trio


def _broken_pipe(error: BaseException) -> bool:
    if isinstance(error, BrokenPipeError):
        return True
    if isinstance(error, BaseExceptionGroup):
        return all(_broken_pipe(inner) for inner in error.exceptions)
    return False


def _quietly(body: Callable[[], int]) -> int:
    """Run ``body``; a reader that went away (``| head``) ends it quietly."""
    try:
        code = body()
        sys.stdout.flush()
        return code
    except BaseException as error:
        if not _broken_pipe(error):
            raise
        # Nothing more can be written; point stdout at /dev/null so the interpreter's final flush is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a program the pipe's signal ended


def _needs_rich() -> str | None:
    try:
        import rich  # noqa: F401
    except ImportError:
        return "the terminal interface needs rich: pip install 'orchestrator[cli]'"
    return None


def main(argv: list[str]) -> int:
    """``run "PROMPT"`` (the default of this function, for compatibility)."""
    return command("run", argv)


def command(name: str, argv: list[str]) -> int:
    problem = _needs_rich()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from orchestrator.cli import args
    from orchestrator.store.errors import StoreError, UnusableLocation

    try:
        if name == "sessions":
            parsed_sessions = args.parse_sessions(argv)
            return _quietly(lambda: _sessions(parsed_sessions))
        options = args.parse_chat(argv) if name == "chat" else args.parse(argv)
        if name == "chat":
            from orchestrator.cli.chat import chat

            return _quietly(lambda: trio.run(chat, options))
        from orchestrator.cli.oneshot import run

        return _quietly(lambda: trio.run(run, options))
    except SystemExit as exit_:
        return int(exit_.code or 0)
    except UnusableLocation as unusable:  # --db (or the default) names a file that cannot be made or opened
        print(f"{name}: {unusable}", file=sys.stderr)
        return 2
    except StoreError as refused:  # the session database refused at open (a newer or unrecognisable schema)
        print(f"{name}: {refused}", file=sys.stderr)
        return 1


def _sessions(parsed: object) -> int:
    from orchestrator.cli.args import SessionsCommand
    from orchestrator.cli.render import Screen
    from orchestrator.cli.session_file import TerminalSessionStore
    from orchestrator.cli.sessions import SessionsRefused, delete_session, list_sessions, show_session
    from orchestrator.cli.titles import SessionTitles

    assert isinstance(parsed, SessionsCommand)
    if not os.path.exists(parsed.db):
        print(f"no session database at {parsed.db}", file=sys.stderr)
        return 1
    tty = sys.stdout.isatty()
    screen = Screen(sys.stdout, tty=tty, color=tty and not os.environ.get("NO_COLOR"))
    store = TerminalSessionStore(parsed.db)
    try:
        titles = SessionTitles.open(parsed.db)  # the run store in the file, when it holds one
    except BaseException:
        store.close()
        raise
    try:
        if parsed.action == "list":
            return list_sessions(store, screen, parsed.db, titles=titles)
        assert parsed.session is not None
        if parsed.action == "show":
            return show_session(store, screen, parsed.session, parsed.db, titles)
        if parsed.action in ("title", "export", "fork"):
            from orchestrator.cli.sessions import export_session, fork_stored, title_session

            if parsed.action == "title":
                return title_session(store, screen, parsed.session, parsed.db, parsed.argument, titles)
            if parsed.action == "export":
                assert parsed.argument is not None
                return export_session(store, screen, parsed.session, parsed.db, parsed.argument, titles)
            return fork_stored(store, screen, parsed.session, parsed.db, parsed.argument, parsed.turn, titles)
        return delete_session(store, screen, parsed.session, parsed.db, titles)
    except SessionsRefused as refused:  # errors go to stderr, so that stdout holds only what was asked for
        screen.end_text()
        print(f"sessions {parsed.action}: {refused}", file=sys.stderr)
        return 1
    finally:
        titles.close()
        store.close()

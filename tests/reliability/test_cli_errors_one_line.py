"""Every ``python -m orchestrator`` command refuses bad input in one line on stderr, never with a traceback.

Each case runs the real command in a subprocess, in a throwaway project with its own XDG folders.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

BAD_SETTINGS = ".orchestrator.toml"
NOTICES = ("no --model given:", "model: ")
"""Lines a command prints before it starts (which model it runs on): not part of an error."""


@attrs.frozen
class Case:
    name: str
    args: tuple[str, ...]
    says: str  # what the error line contains
    files: dict[str, str] = attrs.field(factory=dict)  # written into the project first


def _case(name: str, *args: str, says: str, files: dict[str, str] | None = None) -> Case:
    return Case(name, args, says, files or {})


CASES = [
    _case("unknown command", "--bogus", says="unknown command '--bogus'"),
    _case("demo with an argument", "demo", "--bogus", says="unrecognized arguments: --bogus"),
    _case("run without a prompt", "run", says="the following arguments are required: prompt"),
    _case("run with an empty prompt", "run", "  ", says="the prompt is empty"),
    _case("run with an unknown flag", "run", "hi", "--bogus", says="unrecognized arguments: --bogus"),
    _case("run with an unknown model", "run", "hi", "--model", "nosuch", says="unknown --model 'nosuch'"),
    _case("run with a missing root", "run", "hi", "--root", "/nonexistent/root", says="is not a directory"),
    _case("run with a bad delay", "run", "hi", "--scripted-delay", "soon", says="invalid float value: 'soon'"),
    _case("run with a blank --allow", "run", "hi", "--allow", "", says="a tool name or pattern must not be blank"),
    _case("chat with a blank --deny", "chat", "--deny", " ", says="a tool name or pattern must not be blank"),
    _case("config with a blank --allow", "config", "--allow", "", says="a tool name or pattern must not be blank"),
    _case("run with a folder as --db", "run", "hi", "--db", ".", says="cannot use the store at ."),
    _case("run with a non-database --db", "run", "hi", "--db", "junk.db", says="file is not a database"),
    _case("run with an unknown settings key", "run", "hi", says="unknown key", files={".orchestrator.toml": "x=1"}),
    _case("run with broken TOML", "run", "hi", says="is not valid TOML", files={".orchestrator.toml": "model = [\n"}),
    _case(
        "run with a bad MCP server",
        "run",
        "hi",
        says="a server must be an object",
        files={".mcp.json": '{"mcpServers": {"x": 3}}'},
    ),
    _case("chat with an unknown flag", "chat", "--bogus", says="unrecognized arguments: --bogus"),
    _case("chat with a non-database --db", "chat", "--db", "junk.db", says="file is not a database"),
    _case("sessions without an action", "sessions", says="the following arguments are required: action"),
    _case("sessions show of no database", "sessions", "show", "nosuch", says="no session database at"),
    _case("sessions show of an unknown id", "sessions", "--db", "s.db", "show", "nosuch", says="no session nosuch"),
    _case("sessions delete of an unknown id", "sessions", "--db", "s.db", "delete", "nosuch", says="no session nosuch"),
    _case("sessions title of an unknown id", "sessions", "--db", "s.db", "title", "nosuch", says="no session nosuch"),
    _case("sessions fork of an unknown id", "sessions", "--db", "s.db", "fork", "nosuch", says="no stored session"),
    _case("sessions fork with a bad turn", "sessions", "fork", "x", "--turn", "one", says="invalid int value: 'one'"),
    _case(
        "sessions export of an unknown id", "sessions", "--db", "s.db", "export", "nosuch", "out.md", says="no session"
    ),
    _case("sessions export without a file", "sessions", "export", "x", says="required: FILE"),
    _case("sessions list of a non-database", "sessions", "list", "--db", "junk.db", says="file is not a database"),
    _case("serve with a port out of range", "serve", "--port", "99999", says="invalid port 99999"),
    _case("serve with a port that is no number", "serve", "--port", "http", says="invalid port 'http'"),
    _case("serve with a bad --app spec", "serve", "--app", "bad spec", says="--app must be MODULE:ATTR"),
    _case("serve with an --app that does not import", "serve", "--app", "nosuch:app", says="cannot import 'nosuch'"),
    _case("serve with an --app that is no agent", "serve", "--app", "os:path", says="not an Agent"),
    _case("serve with a non-database --db", "serve", "--db", "junk.db", "--port", "0", says="file is not a database"),
    _case("serve with bad settings", "serve", "--project", ".", says="unknown key", files={BAD_SETTINGS: "x=1"}),
    _case("worker without --db", "worker", says="the following arguments are required: --db"),
    _case("worker with a bad --db URL", "worker", "--db", "junk.db", says="not a run store URL"),
    _case("worker with a bad capacity", "worker", "--db", "sqlite:///r.db", "--capacity", "x", says="--capacity"),
    _case("config with an unknown flag", "config", "--bogus", says="unrecognized arguments: --bogus"),
    _case("config with bad settings", "config", says="unknown key", files={".orchestrator.toml": "x=1"}),
    _case("diagrams with an unknown flag", "diagrams", "--bogus", says="unrecognized arguments: --bogus"),
    _case("diagrams into a file's folder", "diagrams", "--out", "junk.db/diagrams", says="junk.db/diagrams"),
    _case("schema with an unknown flag", "schema", "--bogus", says="unrecognized arguments: --bogus"),
    _case("schema into a file's folder", "schema", "--out", "junk.db/schema.json", says="junk.db"),
]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / ".git").mkdir()  # the project's root: no settings above it are read
    (folder / "junk.db").write_text("not a database\n")
    yield folder


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ORCHESTRATOR_", "XDG_"))}
    env.update(XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"), NO_COLOR="1")
    return env


def _run(args: tuple[str, ...], project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=project,
        env=_environment(project.parent),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _assert_one_line_error(result: subprocess.CompletedProcess[str], says: str) -> None:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(NOTICES)]
    assert len(lines) == 1, result.stderr
    assert says in lines[0], lines[0]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_bad_command_line_is_refused_in_one_line(case: Case, project: Path) -> None:
    for name, text in case.files.items():
        (project / name).write_text(text)
    if "s.db" in case.args:  # a session database that exists but holds no session
        _make_empty_database(project / "s.db")
    _assert_one_line_error(_run(case.args, project), case.says)


def _make_empty_database(path: Path) -> None:
    from orchestrator.extensions.sqlite_store import SQLiteSessionStore

    SQLiteSessionStore(path).close()




def test_serve_on_a_port_in_use_is_refused_in_one_line(project: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = str(taken.getsockname()[1])
        _assert_one_line_error(_run(("serve", "--port", port), project), "Address already in use")
    finally:
        taken.close()

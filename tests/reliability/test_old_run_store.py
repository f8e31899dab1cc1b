"""A run store written before its schema version was recorded, a newer one, and rows that do not decode.

An older ``orchestrator_runs`` (without ``cancel_requested`` and ``lease_token``) is migrated when
``serve --db`` or ``worker`` opens it: its runs are carried and ``GET /sessions`` answers. A store of
a newer or an unrecognisable schema is refused at start with one line and exit code 1. A run whose
checkpoint does not decode fails once, with the reason in a run_failed event, and is never claimed again.
Each case on SQLite and on a real PostgreSQL server (tests/pg.py).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import AgentClient, AssistantMessage, ScriptedModel, create_agent, wire
from orchestrator.messages import UserMessage
from orchestrator.store.errors import SchemaTooNew, SchemaUnrecognised
from orchestrator.store.runs_sql import RUN_SCHEMA_VERSION, open_run_store

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.reliability.test_old_run_store:answering_agent"
START_SECONDS = 60.0
LEASE = 1.0
TOKEN = "t0k"


async def answering_agent() -> AgentClient:
    """Answers every input at once (the worker's app in these tests)."""
    return await create_agent(ScriptedModel([AssistantMessage("answered")], repeat_last=True))


def _old_tables(real: str, serial: str) -> list[str]:
    """The run store's tables as written before the version table and the later columns existed."""
    return [
        f"""CREATE TABLE orchestrator_runs (
            request_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, status TEXT NOT NULL, input TEXT NOT NULL,
            checkpoint TEXT, version BIGINT NOT NULL DEFAULT 0, last_seq BIGINT NOT NULL DEFAULT 0,
            lease_owner TEXT, lease_expires {real}, created {real} NOT NULL, updated {real} NOT NULL)""",
        f"""CREATE TABLE orchestrator_run_events (request_id TEXT NOT NULL, seq BIGINT NOT NULL, type TEXT NOT NULL,
            body TEXT NOT NULL, created {real} NOT NULL, PRIMARY KEY (request_id, seq))""",
        f"""CREATE TABLE orchestrator_inbox (id {serial}, session_id TEXT NOT NULL, request_id TEXT NOT NULL,
            name TEXT NOT NULL, payload TEXT NOT NULL, idempotency_key TEXT UNIQUE, consumed INTEGER NOT NULL DEFAULT 0,
            created {real} NOT NULL)""",
    ]


class Database:
    """Raw SQL on the store's database, written with ``?`` placeholders for both dialects."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.postgres = url.startswith("postgresql://")

    def execute(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.postgres:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as db:
                cursor = db.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
                return cursor.fetchall() if cursor.description else []
        with sqlite3.connect(self.url[len("sqlite:///") :], isolation_level=None) as db:
            return db.execute(sql, params).fetchall()

    def make_old_store(self) -> None:
        postgres = ("DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY")
        real, serial = postgres if self.postgres else ("REAL", "INTEGER PRIMARY KEY")
        for statement in _old_tables(real, serial):
            self.execute(statement)

    def add_run(self, request_id: str, checkpoint: str | None) -> None:
        encoded = json.dumps(wire.encode_message(UserMessage(f"hello from {request_id}")))
        now = time.time()
        self.execute(
            "INSERT INTO orchestrator_runs (request_id, session_id, status, input, checkpoint, version, last_seq,"
            " created, updated) VALUES (?, ?, 'queued', ?, ?, 0, 0, ?, ?)",
            request_id,
            f"s-{request_id}",
            encoded,
            checkpoint,
            now,
            now,
        )

    def run(self, request_id: str) -> tuple[str, int]:
        ((status, version),) = self.execute(
            "SELECT status, version FROM orchestrator_runs WHERE request_id = ?", request_id
        )
        return str(status), int(version)

    def events(self, request_id: str) -> list[dict[str, Any]]:
        rows = self.execute("SELECT body FROM orchestrator_run_events WHERE request_id = ? ORDER BY seq", request_id)
        return [json.loads(body) for (body,) in rows]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        return Database(f"sqlite:///{tmp_path / 'runs.db'}")
    return Database(request.getfixturevalue("postgres_dsn"))


@contextmanager
def started(*args: str, ready: str) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """``python -m orchestrator ARGS`` until a line matches ``ready``: the process, the match, its stderr lines."""
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines: list[str] = []
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + START_SECONDS
        found = None
        while found is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(ready, line)
        assert found is not None, "".join(lines)
        yield process, found.group(0), lines
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                _, rest = process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                _, rest = process.communicate()
            lines.append(rest or "")
        assert "Traceback" not in "".join(lines), "".join(lines)


def _refused(*args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr.rstrip().splitlines()[-1]


def _wait_for(condition: Any, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds:g} s: {what}")


def test_an_older_run_store_is_migrated_and_its_runs_carried(database: Database) -> None:
    database.make_old_store()
    database.add_run("r-old", None)
    with (
        started("serve", "--port", "0", "--db", database.url, "--token", TOKEN, ready=r"http://\S+?(?=[ ,])") as web,
        started("worker", "--app", APP, "--db", database.url, "--lease-seconds", str(LEASE), ready="carrying runs"),
    ):
        _wait_for(lambda: database.run("r-old")[0] == "completed", "the older store's queued run completed")
        url = web[1]
        with httpx.Client(timeout=10, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            sessions = http.get(f"{url}/sessions")
            assert sessions.status_code == 200, sessions.text
            assert "s-r-old" in sessions.text
            started_run = http.post(f"{url}/sessions/s-new/runs", json={"input": "and a new one"})
            assert started_run.status_code == 202, started_run.text
            request_id = started_run.json()["request_id"]
            _wait_for(lambda: database.run(request_id)[0] == "completed", "a run made after the migration completed")
    assert database.execute("SELECT version FROM orchestrator_run_schema") == [(RUN_SCHEMA_VERSION,)]
    assert database.execute("SELECT cancel_requested, lease_token FROM orchestrator_runs WHERE request_id = ?", "r-old")
    store = open_run_store(database.url)  # the current version is used as it is
    try:
        assert store.schema_version() == RUN_SCHEMA_VERSION
        assert store.run("r-old") is not None
    finally:
        store.close()


@pytest.mark.parametrize(
    ("prepare", "expected"),
    [
        (
            [
                "CREATE TABLE orchestrator_run_schema (version INTEGER NOT NULL)",
                "INSERT INTO orchestrator_run_schema VALUES (99)",
            ],
            f"has schema version 99; this library knows versions up to {RUN_SCHEMA_VERSION}",
        ),
        (
            ["CREATE TABLE orchestrator_runs (request_id TEXT PRIMARY KEY, body TEXT)"],
            "table orchestrator_runs has no column session_id, status, input, checkpoint, created, updated",
        ),
    ],
    ids=["newer", "unrecognisable"],
)
def test_a_newer_or_unrecognisable_store_is_refused_at_start_in_one_line(
    database: Database, prepare: list[str], expected: str
) -> None:
    for statement in prepare:
        database.execute(statement)
    error = SchemaTooNew if "99" in prepare[-1] else SchemaUnrecognised
    with pytest.raises(error, match=re.escape(expected)):
        open_run_store(database.url)
    for command in (["serve", "--port", "0", "--token", TOKEN], ["worker", "--app", APP]):
        code, last = _refused(*command, "--db", database.url)
        assert code == 1, last
        assert last.startswith(f"{command[0]}: the run store in ") and expected in last, last
    if error is SchemaTooNew:  # refused stores are left as they were found
        assert database.execute("SELECT version FROM orchestrator_run_schema") == [(99,)]


@pytest.mark.parametrize(
    ("checkpoint", "reason"),
    [("{not json", "its checkpoint is not JSON"), ('{"input_recorded": true, "waiting": [{}]}', "malformed")],
    ids=["not-json", "malformed"],
)
def test_a_checkpoint_that_does_not_decode_fails_its_run_once(database: Database, checkpoint: str, reason: str) -> None:
    database.make_old_store()
    database.add_run("r-bad", checkpoint)
    with (
        started("serve", "--port", "0", "--db", database.url, "--token", TOKEN, ready=r"http://\S+?(?=[ ,])") as web,
        started("worker", "--app", APP, "--db", database.url, "--lease-seconds", str(LEASE), ready="carrying runs"),
    ):
        _wait_for(lambda: database.run("r-bad")[0] == "failed", "the run with the unreadable checkpoint failed")
        _, version = database.run("r-bad")
        time.sleep(4 * LEASE)  # several lease periods: a run claimed again would move its version
        assert database.run("r-bad") == ("failed", version)
        with httpx.Client(timeout=10, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            sessions = http.get(f"{web[1]}/sessions")
            assert sessions.status_code == 200, sessions.text
    events = database.events("r-bad")
    assert [event["type"] for event in events] == ["run_failed"], events
    assert reason in events[0]["error"]["message"], events
    assert events[0]["error"]["type"] == "UnreadableCheckpoint"


def test_get_sessions_answers_while_a_stored_checkpoint_does_not_decode(database: Database) -> None:
    """Without a worker the run stays queued; the web node still lists its session."""
    database.make_old_store()
    database.add_run("r-bad", "{not json")
    with (
        started("serve", "--port", "0", "--db", database.url, "--token", TOKEN, ready=r"http://\S+?(?=[ ,])") as web,
        httpx.Client(timeout=10, headers={"Authorization": f"Bearer {TOKEN}"}) as http,
    ):
        sessions = http.get(f"{web[1]}/sessions")
        assert sessions.status_code == 200, sessions.text
        assert "s-r-bad" in sessions.text
        state = http.get(f"{web[1]}/sessions/s-r-bad")
        assert state.status_code < 500, state.text


def test_a_session_store_opens_a_file_only_the_run_store_wrote(tmp_path: Path) -> None:
    """The run store's SQLite file has ``messages`` and no ``schema_version``: every session table is made."""
    from orchestrator.store import PendingApproval, SQLiteStore

    path = tmp_path / "shared.db"
    open_run_store(f"sqlite:///{path}").close()
    store = SQLiteStore(str(path))
    try:
        store.record_wait(PendingApproval("s1", "r1", "c1", "ask_user", "user_answer", {"question": "go?"}, None, 1.0))
        assert [wait.tool_call_id for wait in store.pending_approvals("s1")] == ["c1"]
        assert store.plan_mode("s1") == "normal"
    finally:
        store.close()


def test_a_session_store_whose_version_table_is_unreadable_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        db.execute("INSERT INTO schema_version VALUES ('two')")
    from orchestrator.store import SQLiteStore

    with pytest.raises(SchemaUnrecognised, match="table schema_version holds 'two'; expected one whole version number"):
        SQLiteStore(str(path))


@pytest.mark.parametrize(
    "argv",
    [["run", "hello"], ["chat"], ["sessions", "list"], ["serve", "--port", "0"]],
    ids=["run", "chat", "sessions", "serve"],
)
def test_a_newer_session_database_is_refused_at_start_in_one_line(argv: list[str], tmp_path: Path) -> None:
    from orchestrator.store import SCHEMA_VERSION

    path = tmp_path / "sessions.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        db.execute("INSERT INTO schema_version VALUES (99)")
    args = [*argv[:1], "--db", str(path), *argv[1:]] if argv[0] == "sessions" else [*argv, "--db", str(path)]
    code, last = _refused(*args)
    assert code == 1, last
    assert last == f"{argv[0]}: {path} has schema version 99; this library knows versions up to {SCHEMA_VERSION}"

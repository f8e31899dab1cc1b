"""A throwaway PostgreSQL server for the tests that need one.

``postgres_server`` (session scope) runs ``initdb`` into a temporary directory
(as the unprivileged ``postgres`` account through ``runuser`` when the tests run
as root, which ``initdb`` refuses), starts it with ``pg_ctl`` on a free
loopback port with ``fsync=off``, and stops it and removes the directory when
the session ends. ``postgres_dsn`` gives each test a fresh empty database on
it. Where the server cannot be had (no binaries, no psycopg, no ``postgres``
account), the tests that use them skip and say why.

Binaries are looked for in ``$ORCHESTRATOR_PG_BIN``, else
``/usr/lib/postgresql/15/bin`` (Debian: ``apt-get install postgresql``), else in
the newest ``/usr/lib/postgresql/*/bin``, else on ``PATH``. Import the fixtures into a conftest to use them
(``tests/conftest.py`` does).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DEFAULT_BIN = "/usr/lib/postgresql/15/bin"
START_SECONDS = 60


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway server: connect as ``postgres`` (trust authentication) on ``port``."""

    port: int
    directory: Path
    bin_dir: Path

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


def _bin_dir() -> Path | None:
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name.zfill(4), reverse=True)
    for candidate in (os.environ.get("ORCHESTRATOR_PG_BIN"), DEFAULT_BIN, *map(str, debian)):
        if candidate and (Path(candidate) / "initdb").is_file():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


def _start() -> PostgresServer | str:
    """A started server, or why none could be started."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    bin_dir = _bin_dir()
    if bin_dir is None:
        return f"PostgreSQL binaries not found (set ORCHESTRATOR_PG_BIN, or install postgresql-15 for {DEFAULT_BIN})"
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' account to run initdb as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is not available to run initdb as 'postgres'"
    directory = Path(tempfile.mkdtemp(prefix="orchestrator-pg-"))
    if os.geteuid() == 0:
        os.chown(directory, account.pw_uid, account.pw_gid)
    directory.chmod(0o700)
    data = directory / "data"
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]
    done = subprocess.run(_as_server_user(initdb), capture_output=True, text=True, timeout=START_SECONDS)
    if done.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        return f"initdb failed: {done.stderr.strip()[-500:]}"
    problem = "not started"
    for _ in range(3):  # another process may take the free port first
        server = PostgresServer(_free_port(), directory, bin_dir)
        problem = _pg_ctl_start(server)
        if not problem:
            return server
    shutil.rmtree(directory, ignore_errors=True)
    return f"pg_ctl start failed: {problem.strip()[-500:]}"


def _pg_ctl_start(server: PostgresServer) -> str:
    """Start ``server`` on its port; why it did not start ("" when it did)."""
    directory = server.directory
    options = f"-p {server.port} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -k {directory}"
    start = [str(server.bin_dir / "pg_ctl"), "-D", str(directory / "data"), "-l", str(directory / "log"), "-w"]
    done = subprocess.run(
        _as_server_user([*start, "-o", options, "start"]), capture_output=True, text=True, timeout=START_SECONDS
    )
    if done.returncode == 0:
        return ""
    log = directory / "log"
    return (done.stderr or "not started") + (log.read_text(errors="replace")[-500:] if log.exists() else "")


def _pg_ctl_stop(server: PostgresServer, mode: str = "immediate") -> None:
    """Stop ``server``, keeping its data: at once (``immediate``, as a crash) or closing its sessions (``fast``)."""
    stop = [str(server.bin_dir / "pg_ctl"), "-D", str(server.directory / "data"), "-m", mode, "-w", "stop"]
    subprocess.run(_as_server_user(stop), capture_output=True, timeout=START_SECONDS)


def _stop(server: PostgresServer) -> None:
    _pg_ctl_stop(server)
    shutil.rmtree(server.directory, ignore_errors=True)


class StoppableServer:
    """A server of one test's own, which the test may stop and start again, as an operator restarts one.

    ``stop`` ends every connection and shuts down cleanly: the throwaway server
    runs with ``fsync=off``, so a crash would also lose what it had committed.
    """

    def __init__(self, server: PostgresServer) -> None:
        self.server = server

    def dsn(self, database: str = "postgres") -> str:
        return self.server.dsn(database)

    def stop(self) -> None:
        _pg_ctl_stop(self.server, "fast")

    def start(self) -> None:
        problem = _pg_ctl_start(self.server)
        assert not problem, f"the server did not start again: {problem[-500:]}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the whole test session (skips, saying why, without one)."""
    started = _start()
    if isinstance(started, str):
        pytest.skip(f"no PostgreSQL server: {started}")
    try:
        yield started
    finally:
        _stop(started)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """The DSN of a fresh, empty database on the throwaway server (dropped afterwards)."""
    import psycopg

    name = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.dsn(name)
    finally:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def stoppable_postgres() -> Iterator[StoppableServer]:
    """A throwaway server of the test's own that it may stop and start again (skips, saying why, without one)."""
    started = _start()
    if isinstance(started, str):
        pytest.skip(f"no PostgreSQL server: {started}")
    try:
        yield StoppableServer(started)
    finally:
        _stop(started)


def end_connections(dsn: str) -> int:
    """End every other connection to ``dsn``'s database from the server's side (as a restart would); how many."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)

"""``python -m orchestrator serve`` as a user runs it: a process on a loopback port."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


ANNOUNCED = re.compile(r"serving on (http://127\.0\.0\.1:\d+) \(console at (\S+)\)")
GENERATED_TOKEN = re.compile(r"/\?access_token=([A-Za-z0-9_-]{32,})$")


@dataclass
class Served:
    """A running ``serve``: its base URL, the console address it printed, the token generated for it (or None)."""

    url: str
    console: str
    token: str | None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@contextmanager
def served(*args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    environment = {**os.environ, **(env or {})}
    if env is None or "ORCHESTRATOR_TOKEN" not in env:
        environment.pop("ORCHESTRATOR_TOKEN", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "serve", "--port", "0", *args],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        assert process.stderr is not None
        found = None
        lines = []
        for _ in range(50):
            line = process.stderr.readline()
            lines.append(line)
            found = ANNOUNCED.search(line)
            if found or not line:
                break
        assert found is not None, "".join(lines)
        token = GENERATED_TOKEN.search(found[2])
        yield Served(found[1], found[2], token[1] if token else None)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _run_to_end(http: httpx.Client, url: str, text: str) -> list[dict[str, object]]:
    started = http.post(f"{url}/sessions/cli-s/runs", json={"input": text})
    assert started.status_code == 202, started.text
    events = []
    with http.stream("GET", f"{url}/runs/{started.json()['request_id']}/events") as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return events


def test_serve_runs_the_default_agent_with_sqlite_sessions_on_loopback(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    with served("--db", str(db), "--root", str(tmp_path), "--token", "t0k") as server, httpx.Client(timeout=10) as http:
        url = server.url
        assert server.console == f"{url}/" and server.token is None  # a token of one's own is not printed
        assert http.get(f"{url}/health").status_code == 200
        assert http.get(f"{url}/sessions").status_code == 401
        http.headers["Authorization"] = "Bearer t0k"
        started = http.post(f"{url}/sessions/cli-s/runs", json={"input": "plan this"})
        assert started.status_code == 202
        request_id = started.json()["request_id"]
        with http.stream("GET", f"{url}/runs/{request_id}/events") as stream:
            for line in stream.iter_lines():
                if line == "event: enter_plan_mode":
                    break
        sessions = http.get(f"{url}/sessions").json()["sessions"]
        assert [s["session_id"] for s in sessions] == ["cli-s"]
        assert sessions[0]["pending"][0]["event"] == "enter_plan_mode"
        cancelled = http.post(f"{url}/runs/{request_id}/cancel")
        assert cancelled.status_code == 202
    assert db.is_file()


def test_serve_app_serves_the_application_agent_or_its_factory() -> None:
    for attribute, answer in (("agent", "from the application's agent"), ("make_client", "from a factory")):
        with served("--app", f"tests.server.sample_app:{attribute}") as server, httpx.Client(timeout=10) as http:
            http.headers.update(server.headers)
            events = _run_to_end(http, server.url, "hello")
        assert events[-1]["type"] == "run_completed"
        assert events[-1]["result"]["content"] == answer


def test_serve_app_that_names_no_agent_exits_2_with_the_reason() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "serve", "--port", "0", "--app", "tests.server.sample_app:not_an_agent"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "not an Agent" in done.stderr


def _listen_backlog(url: str) -> int:
    """The listening socket's queue length as the kernel reports it (``ss``: Send-Q of a LISTEN socket)."""
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed: cannot read the listening socket's backlog")
    port = url.rsplit(":", 1)[1]
    shown = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, timeout=10)
    rows = [line.split() for line in shown.stdout.splitlines() if line.strip()]
    assert len(rows) == 1, shown.stdout
    return int(rows[0][2])


def test_serve_listens_with_a_backlog_of_1024_by_default_and_takes_backlog() -> None:
    with served() as server:
        assert _listen_backlog(server.url) == 1024
    with served("--backlog", "777") as server:
        assert _listen_backlog(server.url) == 777


def test_serve_retained_runs_bounds_the_finished_runs_still_reachable() -> None:
    with (
        served("--retained-runs", "1", "--app", "tests.server.sample_app:agent") as server,
        httpx.Client(timeout=10, headers=server.headers) as http,
    ):
        url = server.url
        first = _run_to_end(http, url, "one")
        second = _run_to_end(http, url, "two")
        assert first[-1]["type"] == second[-1]["type"] == "run_completed"
        gone = http.get(f"{url}/runs/{first[-1]['request_id']}")
        kept = http.get(f"{url}/runs/{second[-1]['request_id']}")
    assert gone.status_code == 404, gone.text
    assert kept.status_code == 200, kept.text


def test_serve_refuses_retained_runs_below_one_and_wherever_the_run_store_keeps_the_runs() -> None:
    for args, reason in (
        (["--retained-runs", "0"], "not at least 1"),
        (["--retained-runs", "5", "--db", "sqlite:///nowhere.db"], "--retained-runs does not apply"),
        (["--retained-runs", "5", "--db", "nowhere.db"], "keeps runs in the run store of its --db file"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", "serve", "--port", "0", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2, done.stderr
        assert reason in done.stderr


def test_serve_refuses_a_backlog_below_one() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "serve", "--port", "0", "--backlog", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "--backlog" in done.stderr and "not at least 1" in done.stderr


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["worker", "--app", "tests.cluster.apps:approval_agent"]])
def test_a_run_store_that_cannot_be_reached_at_start_exits_1_saying_so_without_a_traceback(command: list[str]) -> None:
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *command, "--db", f"postgresql://postgres@127.0.0.1:{port}/none"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert f"{command[0]}: cannot connect to postgresql 127.0.0.1:{port}/none" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--token", "t", "--no-token"], "not allowed with argument"),
        (["--allow-origin", "localhost:3000"], "--allow-origin: 'localhost:3000' is not an http or https origin"),
        (["--allow-origin", "https://app.example/path"], "is not an http or https origin"),
        (["--allow-host", "a b"], "--allow-host: 'a b' is not a host name"),
    ],
)
def test_serve_refuses_a_token_with_no_token_and_malformed_hosts_or_origins(args: list[str], reason: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "serve", "--port", "0", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert reason in done.stderr

"""Worker and web node processes for the multi-process cluster tests.

``Cluster`` starts ``python -m orchestrator worker`` and ``python -m orchestrator serve``
as subprocesses on one run store URL, each logging to a file in ``directory``,
and kills what is still running when it is closed. A web node's URL is read
from its "serving on" line; a worker is ready once it printed "carrying runs".
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.cluster.apps:approval_agent"
START_SECONDS = 60.0
SERVING = re.compile(r"serving on (http://\S+?)[ ,]")


class _Answers:
    """A ``_wait_for`` pattern that matches once ``url`` answers 200 (whatever the log says)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def search(self, output: str) -> bool:
        try:
            return httpx.get(self.url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """``kill -9``: no clean-up of any kind in the process."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@dataclass
class Cluster:
    dsn: str
    directory: Path
    marks: Path
    nodes: list[Node] = field(default_factory=list)
    debug_sessions: str = "%-wait"

    def _spawn(self, name: str, *args: str, module: str = "orchestrator", env: dict[str, str] | None = None) -> Node:
        log = self.directory / f"{name}.log"
        env = {**os.environ, "ORCHESTRATOR_TEST_MARKS": str(self.marks), "PYTHONPATH": str(ROOT), **(env or {})}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", module, *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        node = Node(name, process, log)
        self.nodes.append(node)
        return node

    def _wait_for(self, node: Node, pattern: re.Pattern[str] | _Answers) -> Any:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            found = pattern.search(node.output())
            if found:
                return found
            if node.process.poll() is not None:
                raise RuntimeError(f"{node.name} exited with {node.process.returncode}:\n{node.output()}")
            time.sleep(0.05)
        raise RuntimeError(f"{node.name} did not start in {START_SECONDS:g} s:\n{node.output()}")

    def worker(
        self, name: str, *, lease_seconds: float = 2.0, app: str = APP, capacity: int = 16, named: bool = True
    ) -> Node:
        """A ``worker`` process, ready once it carries runs; its leases name it ``name``, or with ``named=False``
        its default name (``host:pid:random``)."""
        node = self._spawn(
            name,
            "worker",
            "--app",
            app,
            "--db",
            self.dsn,
            *(("--name", name) if named else ()),
            "--lease-seconds",
            str(lease_seconds),
            "--capacity",
            str(capacity),
        )
        self._wait_for(node, re.compile(r"carrying runs"))
        return node

    def web(self, name: str, *, app: str | None = None) -> Node:
        """A web node (``serve --db``); with ``app`` it carries runs with that agent too."""
        carrying = ("--app", app) if app else ()
        node = self._spawn(name, "serve", "--db", self.dsn, "--port", "0", "--no-token", *carrying)
        node.url = self._wait_for(node, SERVING).group(1)
        return node

    @property
    def sqlite_file(self) -> str:
        """The path of the cluster's SQLite file (its ``dsn`` is ``sqlite:///PATH``)."""
        assert self.dsn.startswith("sqlite:///"), self.dsn
        return self.dsn.removeprefix("sqlite:///")

    def serve_default(self, name: str, *extra: str) -> Node:
        """``python -m orchestrator serve`` of the default agent (the scripted model) on the cluster's SQLite file,
        with a plain ``--db PATH``: it keeps its runs in the file's run store and carries them itself."""
        root = str(self.directory)
        node = self._spawn(name, "serve", "--db", self.sqlite_file, "--root", root, "--port", "0", "--no-token", *extra)
        node.url = self._wait_for(node, SERVING).group(1)
        return node

    def uvicorn_web(
        self,
        name: str,
        *,
        workers: int = 1,
        app: str | None = None,
        lifespan: bool = True,
        factory: str = "orchestrator.cluster.asgi:web_node",
    ) -> Node:
        """A web node under uvicorn on asyncio (``workers`` processes on one port), from the ``web_node`` factory
        (or another ``factory`` reading the same environment); with ``app`` (``ORCHESTRATOR_APP``) each of its
        processes carries runs with that agent too. Without ``lifespan`` uvicorn runs none (``--lifespan off``)."""
        carrying = {"ORCHESTRATOR_APP": app} if app else {}
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        node = self._spawn(
            name,
            "--factory",
            factory,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "info",
            *(() if lifespan else ("--lifespan", "off")),
            module="uvicorn",
            env={"ORCHESTRATOR_DB": self.dsn, "ORCHESTRATOR_NO_TOKEN": "1", **carrying},
        )
        node.url = f"http://127.0.0.1:{port}"
        # Each of its processes logs its start-up once it serves (without a lifespan, only that it began).
        started = "Application startup complete" if lifespan else "Started server process"
        self._wait_for(node, re.compile(rf"(?s)({started}.*){{{workers}}}"))
        if not lifespan:
            self._wait_for(node, _Answers(f"{node.url}/health"))
        return node

    def records(self) -> list[str]:
        """The labels ``record`` calls wrote, one per call that ran."""
        log = self.marks / "record.log"
        return log.read_text().splitlines() if log.exists() else []

    def query(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            return connection.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def logs(self) -> str:
        """The processes' output and the store's unfinished runs with their last events and inbox, to debug with."""
        text = [f"--- {node.name}\n{node.output()[-3000:]}" for node in self.nodes]
        try:
            text.append(f"--- runs {self.query('SELECT session_id, status FROM orchestrator_runs')}")
            runs = self.query(
                "SELECT request_id, session_id, status, version, last_seq, lease_owner, lease_expires, checkpoint"
                " FROM orchestrator_runs WHERE status <> 'completed' OR session_id LIKE %s",
                self.debug_sessions,
            )
            for row in runs:
                text.append(f"--- run {row[:7]}\ncheckpoint {str(row[7])[:1500]}")
                events = self.query(
                    "SELECT seq, type, body FROM orchestrator_run_events WHERE request_id = %s"
                    " ORDER BY seq DESC LIMIT 40",
                    row[0],
                )
                text += [f"  event {seq} {kind} {str(body)[:160]}" for seq, kind, body in reversed(events)]
                inbox = self.query(
                    "SELECT id, name, payload, idempotency_key, consumed FROM orchestrator_inbox WHERE request_id = %s",
                    row[0],
                )
                text += [f"  inbox {item}" for item in inbox]
        except Exception as error:  # debugging output only
            text.append(f"(store not readable: {error!r})")
        return "\n".join(text)

    def close(self) -> None:
        for node in self.nodes:
            if node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            try:
                node.process.wait(10)
            except subprocess.TimeoutExpired:
                node.kill()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

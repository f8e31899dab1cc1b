"""Processes that open one new PostgreSQL run store at the same moment all get it.

Every store makes its tables on its first connection (the session history's table among them).
Two makers of one table at once collide in PostgreSQL's catalogue ("relation ... already exists")
unless they take turns, so the first connection's set-up runs under the schema's advisory lock.
"""

from __future__ import annotations

import threading

from orchestrator.store.runs_sql import SQLRunStore, postgres_run_store
from tests.pg import PostgresServer

OPENERS = 8
ROUNDS = 5


def open_at_once(dsn: str) -> tuple[list[SQLRunStore], list[BaseException]]:
    """``OPENERS`` threads open the run store ``dsn`` at one moment: the stores opened, and the failures."""
    start = threading.Barrier(OPENERS)
    opened: list[SQLRunStore] = []
    failures: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(postgres_run_store(dsn))
        except BaseException as failed:
            failures.append(failed)

    threads = [threading.Thread(target=open_one) for _ in range(OPENERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return opened, failures


def test_stores_opened_at_once_on_an_empty_database_all_open(postgres_server: PostgresServer) -> None:
    import psycopg

    for round_number in range(ROUNDS):
        database = f"concurrent_open_{round_number}"
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as db:
            db.execute(f"CREATE DATABASE {database}")
        opened, failures = open_at_once(postgres_server.dsn(database))
        for store in opened:
            store.close()
        assert not failures, f"round {round_number}: {[str(f) for f in failures]}"
        assert len(opened) == OPENERS

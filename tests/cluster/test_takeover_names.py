"""Telling a gone carrier of this machine from a live one by its default name (``host:pid:random``), whose random
part begins with the process's start time: a process that now has a dead carrier's id (a container restarted
under the same host name gets its predecessor's pid) is not taken for that carrier, and a carrier of this very
process is left alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cluster.takeover import gone_from_this_machine, process_started, take_over_local
from orchestrator.cluster.worker import default_name
from orchestrator.store.runs_sql import sqlite_run_store

INPUT = {"role": "user", "content": "hi"}
HOST = socket.gethostname()

pytestmark = pytest.mark.skipif(
    process_started(os.getpid()) is None, reason="this system does not tell a process's start time (/proc)"
)


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    """Another live process of this machine."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _named(pid: int, started: int | None) -> str:
    return f"{HOST}:{pid}:t{started}-abc123" if started is not None else f"{HOST}:{pid}:abc123"


def test_a_default_name_records_this_process_and_its_start() -> None:
    host, pid, random_part = default_name().split(":")
    assert (host, int(pid)) == (HOST, os.getpid())
    assert random_part.startswith(f"t{process_started(os.getpid())}-")


def test_a_carrier_of_this_very_process_is_alive() -> None:
    assert not gone_from_this_machine(default_name())
    assert not gone_from_this_machine(_named(os.getpid(), None))  # a name without a start: by its id alone


def test_a_carrier_whose_id_a_later_process_has_is_gone(other_process: subprocess.Popen[bytes]) -> None:
    started = process_started(other_process.pid)
    assert started is not None
    assert not gone_from_this_machine(_named(other_process.pid, started))
    assert gone_from_this_machine(_named(other_process.pid, started - 1))
    assert gone_from_this_machine(_named(os.getpid(), started + 10**9))  # this process's id, another start
    assert not gone_from_this_machine(_named(other_process.pid, None))  # an older name: alive by its id


def test_a_carrier_whose_process_ended_is_gone() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert gone_from_this_machine(_named(ended.pid, None))
    assert gone_from_this_machine(_named(ended.pid, 12345))


def test_a_store_hands_over_at_once_only_the_runs_of_the_carrier_that_had_this_id(tmp_path: Path) -> None:
    store = sqlite_run_store(str(tmp_path / "runs.db"))
    try:
        own_start = process_started(os.getpid())
        assert own_start is not None
        predecessor = _named(os.getpid(), own_start - 1)  # this id, an earlier process: a restarted container's
        sibling = default_name()  # another carrier of this process
        for request_id, owner in (("old", predecessor), ("live", sibling)):
            store.create_run(f"s-{request_id}", request_id, INPUT)
            [lease] = store.claim(owner, 600)
            assert lease.request_id == request_id
        assert take_over_local(store) == ["old"]
        # The next claim takes the predecessor's run over at once; the sibling's stays with it.
        assert [lease.request_id for lease in store.claim("next", 30, limit=2)] == ["old"]
        assert store.run("live").lease_owner == sibling  # type: ignore[union-attr]
    finally:
        store.close()

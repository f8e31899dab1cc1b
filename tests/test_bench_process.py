"""A benchmark cell that outlives its timeout leaves nothing running: its servers go with it."""

from __future__ import annotations

import os
import sys
import time

from bench.process import run_cell_command

SPAWNER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "open(sys.argv[1], 'w').write(str(child.pid))\n"
    "time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for init to reap it is gone too
        return stat.read().split()[2] != "Z"


def test_a_cell_that_times_out_takes_the_server_it_started_with_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "child.pid"
    got = run_cell_command([sys.executable, "-c", SPAWNER, str(marker)], timeout=3)
    assert got["failed"].startswith("timed out"), got
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), f"the cell's child {child} outlived it"


def test_a_cell_that_prints_its_result_gives_it_back() -> None:
    got = run_cell_command([sys.executable, "-c", "print('noise'); print('{\"x\": 1}')"], timeout=30)
    assert got == {"x": 1}

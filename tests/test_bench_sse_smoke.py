"""The SSE workloads of the benchmark still run (tiny sizes, no timing checks)."""

from __future__ import annotations

import pytest

pytest.importorskip("hypercorn", reason="the SSE workloads serve the app with hypercorn (pip install -e '.[server]')")
pytest.importorskip("httpx", reason="the SSE workloads read with httpx")

from bench import readme, sse, sse_cells
from bench.sse_app import Shape
from bench.sse_server import LOOPBACK, ServerProcess, process_cpu_seconds

TINY = sse.SsePlan(
    words=40, stream_repeats=1, runs=4, latency=0.001, tool_turns=2, answer_words=3, rounds=1, cell_timeout=60
)


def test_every_workload_reads_every_event_over_sse_and_in_process() -> None:
    rows = sse.measure(TINY, lambda _: None)
    assert not [row for row in rows if "failed" in row], [row for row in rows if "failed" in row]
    streams = {row["transport"]: row for row in rows if row["workload"] == "stream"}
    assert set(streams) == {"inprocess", "sse", "sse-uvicorn"}
    for row in streams.values():
        (sample,) = row["samples"]
        assert sample["problems"] == []
        assert sample["deltas"] == 40
    for served in ("sse", "sse-uvicorn"):
        assert streams[served]["samples"][0]["server_cpu_seconds"] is not None
        assert streams[served]["samples"][0]["events"] == streams["inprocess"]["samples"][0]["events"]
    concurrent = {row["transport"]: row for row in rows if row["workload"] == "concurrent"}
    assert set(concurrent) == {"inprocess", "sse", "sse-uvicorn", "floor", "floor-uvicorn"}
    for row in concurrent.values():
        assert row["failed_runs"] == 0, row["problems"]
        assert row["deltas"] == 4 * 3
        assert len(row["run_seconds"]) == 4
        assert row["ideal_seconds"] == pytest.approx(3 * 0.001)
    assert concurrent["sse"]["events"] == concurrent["sse-uvicorn"]["events"] == concurrent["inprocess"]["events"]
    for floor in ("floor", "floor-uvicorn"):
        # The server floor replays each run the service answered: the same events, in the same writes.
        assert concurrent[floor]["events"] == concurrent["inprocess"]["events"]
        assert concurrent[floor]["server_cpu_seconds"] is not None
        assert concurrent[floor]["recorded_writes"] >= 4  # at least one write per stream
        assert concurrent[floor]["writes"] == concurrent[floor]["recorded_writes"]
    tables = sse.render(rows)
    assert "SSE: hypercorn on 127.0.0.1" in tables and "in-process: client.start" in tables
    assert "SSE: uvicorn + AgentHost on 127.0.0.1" in tables
    assert "4 of 4" in tables
    assert "hypercorn, server floor (raw ASGI, same traffic)" in tables
    assert "uvicorn, server floor (raw ASGI, same traffic)" in tables
    assert "server / in-process" in tables and "writes/stream" in tables
    assert "failed" not in tables


@pytest.mark.parametrize("server_name", ["hypercorn", "uvicorn"])
def test_the_server_binds_loopback_and_reports_its_cpu(server_name: str) -> None:
    with ServerProcess(Shape(words=1), server=server_name) as server:
        assert server.url.startswith(f"http://{LOOPBACK}:")
        assert process_cpu_seconds(server.pid) > 0
        assert server.failure() is None
    assert server.failure() is not None


def test_a_gap_or_a_missing_terminal_event_is_a_problem() -> None:
    gap = sse_cells.Tally()
    gap.see(1, "run_started")
    gap.see(3, "run_completed")
    gap.finish()
    assert gap.problem == "event 2 arrived as seq 3"
    cut = sse_cells.Tally()
    cut.see(1, "run_started")
    cut.see(2, "text_delta")
    cut.finish()
    assert cut.problem is not None and "not a terminal event" in cut.problem
    whole = sse_cells.Tally()
    whole.see(1, "text_delta")
    whole.see(2, "run_completed")
    whole.finish()
    assert whole.problem is None and whole.deltas == 1


def test_the_sse_block_is_written_between_its_own_markers() -> None:
    text = sse.README.read_text(encoding="utf-8")
    assert text.count(sse.BEGIN) == 1 and text.count(sse.END) == 1
    assert text.count(readme.BEGIN) == 1
    document = {
        "when": "2026-01-01T00:00:00+00:00",
        "command": "python -m bench --only sse --readme",
        "commit": "abc",
        "machine": {"cpus": 2, "processor": "cpu", "platform": "linux", "python": "3.11"},
        "load": {"before": [0.1, 0.2, 0.3], "after": [0.1, 0.2, 0.3]},
        "note": "quiet",
        "cpu": 1,
        "seconds": 1.0,
    }
    block = sse.section(document, "TABLES")
    assert block.startswith(sse.BEGIN) and block.endswith(sse.END)
    assert "TABLES" in block and "Note: quiet" in block

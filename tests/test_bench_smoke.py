"""The benchmark's own workloads still run on orchestrator (tiny sizes, no timing checks)."""

from __future__ import annotations

import attrs

from bench import imports, readme, report, run
from bench.drivers import floor, ours, raw


def test_per_turn_workload_times_every_repeat() -> None:
    result = ours.turns(turns=5, repeats=2, mode="run")
    assert result["turns"] == 5
    assert len(result["seconds"]) == 2
    assert all(seconds > 0 for seconds in result["seconds"])
    assert result["edges_per_turn"] == 4


def test_the_design_floor_fires_bare_transitions_triggers() -> None:
    result = floor.trigger(count=20, repeats=2)
    assert len(result["seconds_per_trigger"]) == 2


def test_every_streamed_delta_reaches_the_consumer() -> None:
    assert ours.streaming(deltas=50, repeats=2)["deltas_seen"] == 50
    assert raw.streaming(deltas=50, repeats=1)["deltas_seen"] == 50
    slow = ours.streaming(deltas=50, repeats=1, slow=True, pause=0.01)
    assert slow["deltas_seen"] == 50
    assert slow["peak_traced"] > 0


def test_concurrent_sessions_consume_every_delta_of_every_call() -> None:
    result = ours.concurrent(sessions=3, tool_turns=2, latency=0.001, deltas=4)
    assert result["model_calls"] == 9
    assert result["deltas_seen"] == 36
    assert 0 <= result["gc_share"] < 1


def test_per_turn_workload_streams_too() -> None:
    result = ours.turns(turns=3, repeats=1, mode="stream")
    assert result["mode"] == "stream"
    assert len(result["seconds"]) == 1


def test_every_waiting_session_is_approved_and_drains() -> None:
    result = ours.sessions(count=8, trace=True, extension="approval")
    assert result["accepted"] == 8
    assert result["sessions"] == 8
    assert result["rss_waiting"] > 0
    assert "traced_per_session" in result


def test_plan_mode_sessions_are_approved() -> None:
    result = ours.sessions(count=4, trace=False, extension="plan_mode")
    assert result["accepted"] == 4


def test_each_steering_message_reaches_the_next_model_request() -> None:
    result = ours.steering(runs=5)
    assert result["refused"] == 0
    assert result["missed"] == 0
    assert len(result["latencies"]) == 5


def test_a_cell_reports_its_figures_from_a_fresh_process() -> None:
    result = run.run_cell("turns", "ours", {"turns": 2, "repeats": 1, "mode": "run"}, timeout=60)
    assert len(result["seconds"]) == 1


def test_importtime_lines_are_parsed() -> None:
    stderr = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |   attr\n"
        "import time:       300 |        420 | orchestrator\n"
    )
    assert imports.parse_importtime(stderr) == [
        imports.ImportLine("attr", 120, 120),
        imports.ImportLine("orchestrator", 300, 420),
    ]


def test_table_and_targets_render_from_measured_rows() -> None:
    plan = attrs.evolve(run.QUICK, turns=3, turn_repeats=1, floor_triggers=20, steering_runs=3)
    silent: list[str] = []
    results = {
        "turns": run.bench_turns(plan, ("raw", "ours"), silent.append),
        "steering": run.bench_steering(plan, ("ours",), silent.append),
    }
    table = report.render(results, plan)
    assert "orchestrator (client.stream, every event consumed)" in table
    assert "design floor (bare transitions trigger): 4 edges" in table
    names = [check["target"] for check in report.targets(results, plan)]
    assert "per turn: orchestrator stream / design floor" in names
    assert "steering latency p99, orchestrator" in names
    assert silent


def test_the_readme_section_is_written_between_its_markers_only() -> None:
    text = readme.README.read_text(encoding="utf-8")
    assert text.count(readme.BEGIN) == 1 and text.count(readme.END) == 1
    document = {
        "when": "2026-01-01T00:00:00+00:00",
        "command": "python -m bench --readme",
        "commit": "abc",
        "machine": {"cpus": 2, "processor": "cpu", "platform": "linux", "python": "3.11"},
        "load": {"before": [0.1, 0.2, 0.3], "after": [0.1, 0.2, 0.3]},
        "note": "quiet",
        "cpu": 1,
        "seconds": 1.0,
        "results": {"profile": [{"runtime": "ours", "text": "PROFILE"}]},
    }
    section = readme.section(document, "TABLES")
    assert section.startswith(readme.BEGIN) and section.endswith(readme.END)
    assert "TABLES" in section and "PROFILE" in section and "Note: quiet" in section

"""The benchmark's own workloads still run on orchestrator (tiny sizes, no timing checks)."""

from __future__ import annotations

import attrs

from bench import imports, report, run
from bench.drivers import ours


def test_per_turn_workload_times_every_repeat() -> None:
    result = ours.turns(turns=5, repeats=2, mode="run")
    assert result["turns"] == 5
    assert len(result["seconds"]) == 2
    assert all(seconds > 0 for seconds in result["seconds"])


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


def test_the_command_line_offers_every_experiment() -> None:
    from bench import experiments

    assert set(run.EXPERIMENT_NAMES) == set(experiments.EXPERIMENTS)


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
    plan = attrs.evolve(run.QUICK, turns=3, turn_repeats=1, sessions=4, steering_runs=3)
    silent: list[str] = []
    results = {
        "turns": run.bench_turns(plan, ("ours",), silent.append),
        "steering": run.bench_steering(plan, ("ours",), silent.append),
    }
    table = report.render(results, plan)
    assert "orchestrator (client.run)" in table
    names = [check["target"] for check in report.targets(results)]
    assert "steering latency p99, orchestrator" in names
    assert silent

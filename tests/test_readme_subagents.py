"""The documented subagent example runs as written, in a fresh interpreter."""

from __future__ import annotations

from pathlib import Path

from test_readme_embedding import examples, run_example


def test_the_subagent_example_forwards_the_child_and_answers_its_question(tmp_path: Path) -> None:
    lines = run_example(examples()["subagents"], tmp_path)
    events = [line.split(" ") for line in lines if line[:1].isdigit()]
    seqs = [int(seq) for seq, _, _ in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    sessions_and_names = [(session, name) for _, session, name in events]
    assert sessions_and_names == [
        ("s1", "run_started"),
        ("s1", "model_completed"),
        ("s1", "tool_started"),
        ("s1", "subagent_started"),
        ("s1:r1", "run_started"),
        ("s1:r1", "model_completed"),
        ("s1:r1", "tool_started"),
        ("s1:r1", "ask_user"),
        ("s1:r1", "tool_completed"),
        ("s1:r1", "model_completed"),
        ("s1:r1", "run_completed"),
        ("s1", "subagent_completed"),
        ("s1", "tool_completed"),
        ("s1", "model_completed"),
        ("s1", "run_completed"),
    ]
    assert "  child s1:r1 runs call r1" in lines
    assert "  answered; accepted by ['subagent:research']" in lines
    assert lines[-2] == (
        "child path: setup -> awaiting_model -> awaiting_tool -> awaiting_approval -> awaiting_tool -> "
        "turn_settled -> awaiting_model -> answered -> concluding -> completed"
    )
    assert lines[-1] == "nested in trace: True"

"""The CLI's compact lines (a tool call on one line with long values elided, a result collapsed to one line) and its status line."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator import ToolCall, ToolMessage, ToolStatus
from orchestrator.cli.render import THINKING_CHARS, Screen, call_line, result_line


def test_a_tool_call_is_one_line_with_long_values_elided() -> None:
    content = "line one\nline two\n" + "x" * 500
    shown = call_line(ToolCall("c1", "write_file", {"path": "notes/todo.md", "content": content}))
    assert "\n" not in shown
    assert shown.startswith('write_file(path="notes/todo.md", content="line one')
    assert "…" in shown and len(shown) <= 100
    assert "x" * 50 not in shown


def test_a_call_with_many_arguments_stays_within_the_limit() -> None:
    arguments = {f"arg{n}": "value" * 3 for n in range(30)}
    shown = call_line(ToolCall("c2", "bash", arguments), limit=80)
    assert len(shown) == 80 and shown.endswith("…")


def test_the_plan_is_not_repeated_in_the_exit_plan_mode_call_line() -> None:
    shown = call_line(ToolCall("c3", "exit_plan_mode", {"plan": "1. a very long plan"}))
    assert "very long plan" not in shown


def test_a_result_is_collapsed_to_its_status_and_first_line() -> None:
    result = ToolMessage("c1", "read_file", "first line\nsecond\nthird", status=ToolStatus.SUCCEEDED)
    shown = result_line(result)
    assert "\n" not in shown
    assert shown.startswith("read_file ") and "first line" in shown and "(3 lines)" in shown
    assert "second" not in shown
    failed = result_line(ToolMessage("c2", "bash", "boom", status=ToolStatus.FAILED))
    assert "failed" in failed.lower() and "boom" in failed


def test_the_status_line_shows_the_end_of_the_reasoning_until_the_answer_begins() -> None:
    out = io.StringIO()
    screen = Screen(out, tty=True, color=False)
    screen.begin_turn()
    try:
        screen.phase("awaiting_model")
        screen.reasoning("First I compare\nthe two ")
        screen.reasoning("options " + "x" * 100)
        assert screen.status is not None
        shown = screen.status.thinking
        assert len(shown) == THINKING_CHARS and shown.endswith("x" * 10) and "\n" not in shown
        screen.reasoning("")
        screen.status.thinking = "I compare the two options"
        console = Console(file=io.StringIO(), width=200, color_system=None)
        console.print(screen.status.__rich__())
        assert "thinking: I compare the two options" in console.file.getvalue()  # type: ignore[attr-defined]
        screen.text("The answer")
        assert screen.status.thinking == ""
    finally:
        screen.end_turn()


def test_plain_output_leaves_reasoning_out() -> None:
    out = io.StringIO()
    screen = Screen(out, tty=False, color=False)
    screen.reasoning("secret musing")
    screen.text("answer\n")
    assert out.getvalue() == "answer\n"

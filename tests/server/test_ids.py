"""The id rule: control characters and lone surrogates are refused, every other character is kept."""

from __future__ import annotations

import pytest

from orchestrator.server.ids import id_problem


@pytest.mark.parametrize(
    "value", ["s1", "a b", "~!@#$%^&*()[]{}|/\\'\"`", "sitzung-ü", "会话", "a\u00a0b", "a\u200bb", "x" * 200]
)
def test_an_id_without_refused_characters_is_taken(value: str) -> None:
    assert id_problem(value) is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("a\x00b", "a control character ('\\x00' at position 1)"),
        ("line\nbreak", "a control character ('\\n' at position 4)"),
        ("del\x7f", "a control character ('\\x7f' at position 3)"),
        ("ü\x85", "a control character ('\\x85' at position 1)"),
        ("a\ud800", "a lone surrogate ('\\ud800' at position 1)"),
    ],
)
def test_an_id_with_a_control_character_or_a_lone_surrogate_is_refused(value: str, reason: str) -> None:
    assert id_problem(value) == f"must not contain {reason}"


def test_a_blank_or_overlong_id_is_refused() -> None:
    assert id_problem("   ") == id_problem("x" * 201) == "must be 1 to 200 characters, not all blank"

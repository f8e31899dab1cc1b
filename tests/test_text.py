"""clean_text and SurrogateJoiner: text that always encodes as UTF-8."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.text import SurrogateJoiner, clean_json, clean_text


def test_a_surrogate_pair_is_joined_into_its_character() -> None:
    assert clean_text("a\ud83d\ude00b") == "a\U0001f600b"


def test_lone_surrogates_become_replacement_characters() -> None:
    assert clean_text("x\ud83dy\ude00z\udcff") == "x\ufffdy\ufffdz\ufffd"
    assert clean_text("\ud83d") == "\ufffd"


def test_text_without_surrogates_is_returned_unchanged() -> None:
    text = "plain \U0001f600 text"
    assert clean_text(text) is text


def test_a_pair_split_between_two_pieces_is_kept_whole() -> None:
    joiner = SurrogateJoiner()
    assert joiner.feed("ok \ud83d") == "ok "
    assert joiner.pending
    assert joiner.feed("\ude00!") == "\U0001f600!"
    assert joiner.flush() == ""


def test_a_stream_ending_inside_a_pair_releases_a_replacement_character() -> None:
    joiner = SurrogateJoiner()
    assert joiner.feed("end\ud83d") == "end"
    assert joiner.flush() == "\ufffd"
    assert not joiner.pending


def test_a_high_surrogate_followed_by_ordinary_text_is_replaced() -> None:
    joiner = SurrogateJoiner()
    assert joiner.feed("\ud83d") == ""
    assert joiner.feed("x") == "\ufffdx"


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x1FFFF)), max_size=6))
def test_cleaned_pieces_always_encode_and_equal_cleaning_the_whole(pieces: list[str]) -> None:
    joiner = SurrogateJoiner()
    out = "".join(joiner.feed(piece) for piece in pieces) + joiner.flush()
    out.encode("utf-8")
    assert out == clean_text("".join(pieces))


def test_clean_json_cleans_every_string_keys_included() -> None:
    value = {"a\ud83d": ["x\ud83d\ude00", {"k": "\udcff"}], "n": 1}
    assert clean_json(value) == {"a\ufffd": ["x\U0001f600", {"k": "\ufffd"}], "n": 1}
    clean = {"ok": ["fine", 2]}
    assert clean_json(clean) is clean

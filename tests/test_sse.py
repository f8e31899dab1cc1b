"""The incremental Server-Sent Events parser."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from orchestrator.providers.sse import ServerSentEvent, parse_sse, split_lines


async def lines_of(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def parse(*lines: str) -> list[ServerSentEvent]:
    return [event async for event in parse_sse(lines_of(*lines))]


async def test_data_lines_dispatch_on_blank_line() -> None:
    events = await parse('data: {"a":1}', "", "data: [DONE]", "")
    assert events == [ServerSentEvent(data='{"a":1}'), ServerSentEvent(data="[DONE]")]


async def test_event_field_names_the_type_and_resets_after_dispatch() -> None:
    events = await parse("event: message_start", 'data: {"type":"message_start"}', "", "data: plain", "")
    assert [(e.event, e.data) for e in events] == [("message_start", '{"type":"message_start"}'), ("message", "plain")]


async def test_multi_line_data_is_joined_with_newlines() -> None:
    events = await parse("data: first", "data:second", "data:  third", "")
    assert events == [ServerSentEvent(data="first\nsecond\n third")]


async def test_comments_and_unknown_fields_are_ignored() -> None:
    events = await parse(": keep-alive", "data: x", ": between", "foo: bar", "", ":", "")
    assert events == [ServerSentEvent(data="x")]


async def test_event_without_data_is_not_dispatched() -> None:
    events = await parse("event: ping", "", "", "data: y", "")
    assert events == [ServerSentEvent(data="y")]


async def test_id_and_retry_fields_carry_over() -> None:
    events = await parse("id: 7", "retry: 1500", "data: a", "", "retry: soon", "data: b", "")
    assert [(e.id, e.retry, e.data) for e in events] == [("7", 1500, "a"), ("7", 1500, "b")]


async def test_field_without_colon_and_crlf_terminators() -> None:
    events = await parse("\ufeffdata\r\n", "data: z\r\n", "\r\n")
    assert events == [ServerSentEvent(data="\nz")]


async def test_last_event_without_blank_line_is_dispatched() -> None:
    events = await parse("data: a", "", "data: [DONE]")
    assert [e.data for e in events] == ["a", "[DONE]"]


async def test_parser_is_incremental() -> None:
    seen: list[str] = []

    async def source() -> AsyncIterator[str]:
        for line in ("data: one", "", "data: two", ""):
            seen.append(line)
            yield line

    parser = parse_sse(source())
    first = await parser.__anext__()
    assert first.data == "one"
    assert seen == ["data: one", ""]
    await parser.aclose()


async def chunks_of(*chunks: bytes) -> AsyncIterator[bytes]:
    for piece in chunks:
        yield piece


async def split(*chunks: bytes, limit: int = 1024) -> list[str]:
    return [line async for line in split_lines(chunks_of(*chunks), limit)]


async def test_lines_end_at_crlf_lf_or_cr_even_across_chunks() -> None:
    assert await split(b"a\r", b"\nb\n", b"c\rd", b"\r\n\r\n") == ["a", "b", "c", "d", ""]
    assert await split(b"data: x\r", b"\r", b"\n") == ["data: x", ""]
    assert await split(b"tail without end") == ["tail without end"]


async def test_multibyte_characters_split_between_chunks_decode_whole() -> None:
    smile = "\U0001f600".encode()
    assert await split(b"a" + smile[:2], smile[2:] + b"\n", b"\xff\n") == ["a\U0001f600", "\ufffd"]


async def test_a_line_past_the_limit_raises_as_soon_as_it_is_too_long() -> None:
    from orchestrator.providers import MalformedStreamError

    assert await split(b"x" * 8 + b"\n", limit=8) == ["x" * 8]
    with pytest.raises(MalformedStreamError, match="longer than 8 bytes"):
        await split(b"xxxx", b"xxxx", b"x", limit=8)
    with pytest.raises(MalformedStreamError, match="longer than 8 bytes"):
        await split(b"ok\n" + b"y" * 9 + b"\n", limit=8)


async def test_event_data_past_the_limit_raises() -> None:
    from orchestrator.providers import MalformedStreamError

    with pytest.raises(MalformedStreamError, match="longer than 10 characters"):
        [event async for event in parse_sse(lines_of("data: 12345", "data: 67890", ""), 10)]

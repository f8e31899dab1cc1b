"""Tool results with images: what a tool may return, what history keeps, how every codec carries it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import trio
from support import unchecked

from orchestrator import (
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    ImagePart,
    ScriptedModel,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolStatus,
    create_agent,
    describe_parts,
    tool,
    wire,
)
from orchestrator.cli.render import result_line
from orchestrator.events import ToolCompletedEvent
from orchestrator.extensions.compaction import IMAGE_TOKENS, estimate_tokens, transcript
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.messages import clean_message
from orchestrator.store import UndecodableMessage, decode_message, encode_message
from orchestrator.tool_content import (
    MAX_IMAGE_BYTES,
    MAX_RESULT_IMAGE_BYTES,
    MAX_RESULT_IMAGES,
    UnsupportedToolResult,
    tool_content,
)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(24))
CHART = ImagePart(data=PNG, media_type="image/png")
REMOTE = ImagePart(url="https://example.test/chart.jpg", media_type="image/jpeg")


async def results_seen_by_the_model(*tools: Any, calls: tuple[ToolCall, ...]) -> dict[str, ToolMessage]:
    """Run one turn calling ``calls``; the tool messages the model's next request holds."""
    model = ScriptedModel([AssistantMessage("", calls), AssistantMessage("done")])
    agent = await create_agent(model, tools=list(tools))
    with trio.fail_after(10):
        await agent.run("go")
    return {m.tool_call_id: m for m in model.requests[1].messages if isinstance(m, ToolMessage)}


# what a tool may return --------------------------------------------------------


async def test_a_tool_returning_an_image_gives_the_model_a_result_with_that_image() -> None:
    @tool
    def plot() -> ImagePart:
        """Draw."""
        return CHART

    seen = await results_seen_by_the_model(plot, calls=(ToolCall("p", "plot"),))
    assert seen["p"] == ToolMessage("p", "plot", (CHART,), ToolStatus.SUCCEEDED)
    assert seen["p"].text == ""


async def test_a_list_mixing_text_and_images_keeps_its_order_and_strings_become_text_parts() -> None:
    @tool
    async def shots() -> list[object]:
        """Screenshots."""
        return ["before:", CHART, TextPart(" after:"), REMOTE]

    seen = await results_seen_by_the_model(shots, calls=(ToolCall("s", "shots"),))
    assert seen["s"].content == (TextPart("before:"), CHART, TextPart(" after:"), REMOTE)
    assert seen["s"].text == "before: after:"
    assert describe_parts(seen["s"].content) == (
        f"before:[image: image/png, {len(PNG)} bytes] after:[image: image/jpeg, https://example.test/chart.jpg]"
    )


async def test_a_list_without_parts_is_still_json_text_and_a_text_part_alone_is_text() -> None:
    @tool
    def numbers() -> list[int]:
        """Numbers."""
        return [1, 2]

    @tool
    def words() -> TextPart:
        """Words."""
        return TextPart("just text")

    seen = await results_seen_by_the_model(numbers, words, calls=(ToolCall("n", "numbers"), ToolCall("w", "words")))
    assert seen["n"].content == "[1, 2]"
    assert seen["w"].content == "just text"


async def test_a_tool_returning_an_unsupported_part_fails_with_the_reason() -> None:
    @tool
    def mixed() -> list[object]:
        """Mixed."""
        return ["text", CHART, 42]

    @tool
    def textual_image() -> ImagePart:
        """An image whose data is text."""
        return ImagePart(data="aGVsbG8=", media_type="image/png")  # type: ignore[arg-type]

    seen = await results_seen_by_the_model(
        mixed, textual_image, calls=(ToolCall("m", "mixed"), ToolCall("t", "textual_image"))
    )
    assert seen["m"].status is ToolStatus.FAILED
    assert seen["m"].content == (
        "unsupported tool result: part 2 is a int; a result's parts must be str, TextPart or ImagePart"
    )
    assert seen["t"].status is ToolStatus.FAILED
    assert seen["t"].content == "TypeError: ImagePart.data must be bytes or None, got str"  # refused when made


async def test_a_hook_may_turn_a_result_into_parts_and_an_unsupported_one_fails_the_call() -> None:
    class Screenshot(AgentExtension):
        async def after_tool(
            self, context: Any, call: ToolCall, result: ToolResult, error: BaseException | None
        ) -> None:
            if call.id == "good":
                result.content = [f"{result.content} ->", CHART]
            else:
                result.content = [CHART, object()]  # type: ignore[list-item]

    @tool
    def act() -> str:
        """Act."""
        return "clicked"

    model = ScriptedModel(
        [AssistantMessage("", (ToolCall("good", "act"), ToolCall("bad", "act"))), AssistantMessage("x")]
    )
    agent = await create_agent(model, tools=[act], extensions=[Screenshot()])
    events = [event async for event in agent.stream("go")]
    seen = {m.tool_call_id: m for m in model.requests[1].messages if isinstance(m, ToolMessage)}
    assert seen["good"] == ToolMessage("good", "act", (TextPart("clicked ->"), CHART))
    assert seen["bad"].status is ToolStatus.FAILED
    assert seen["bad"].content == (
        "unsupported tool result: part 1 is a object; a result's parts must be str, TextPart or ImagePart"
    )
    completed = [e.payload["result"] for e in events if e.name == "tool_completed"]
    assert completed == [seen["good"]]
    assert [e.payload["result"] for e in events if e.name == "tool_failed"] == [seen["bad"]]


# bounds ------------------------------------------------------------------------


def test_an_oversized_image_is_left_out_with_a_note_and_the_rest_is_kept() -> None:
    huge = ImagePart(data=b"\0" * (MAX_IMAGE_BYTES + 1), media_type="image/png")
    content = tool_content(["see:", huge, CHART])
    assert content == (
        TextPart("see:"),
        TextPart(
            f"[image: image/png, {MAX_IMAGE_BYTES + 1} bytes left out: "
            f"{MAX_IMAGE_BYTES + 1} bytes is over the {MAX_IMAGE_BYTES}-byte limit for one image]"
        ),
        CHART,
    )
    long_url = ImagePart(url="https://example.test/" + "a" * MAX_IMAGE_BYTES)
    noted = tool_content(long_url)
    assert noted == (
        f"[image: image/png left out: {MAX_IMAGE_BYTES + 21} bytes is over the "
        f"{MAX_IMAGE_BYTES}-byte limit for one image]"
    )


def test_the_images_of_one_result_are_bounded_in_number_and_in_total_size() -> None:
    many = tool_content([CHART] * (MAX_RESULT_IMAGES + 2))
    assert isinstance(many, tuple)
    assert many[:MAX_RESULT_IMAGES] == (CHART,) * MAX_RESULT_IMAGES
    assert (
        many[MAX_RESULT_IMAGES:]
        == (
            TextPart(
                f"[image: image/png, {len(PNG)} bytes left out: a result carries at most {MAX_RESULT_IMAGES} images]"
            ),
        )
        * 2
    )
    big = ImagePart(data=b"\0" * MAX_IMAGE_BYTES, media_type="image/png")
    count = MAX_RESULT_IMAGE_BYTES // MAX_IMAGE_BYTES
    bounded = tool_content([big] * (count + 1))
    assert isinstance(bounded, tuple)
    assert sum(isinstance(part, ImagePart) for part in bounded) == count
    last = bounded[-1]
    assert isinstance(last, TextPart) and f"total at most {MAX_RESULT_IMAGE_BYTES} bytes" in last.text


def test_image_data_of_a_type_no_provider_takes_is_left_out_and_a_result_without_images_is_text() -> None:
    svg = ImagePart(data=b"<svg/>", media_type="image/svg+xml")
    assert tool_content(["drawing: ", svg]) == (
        "drawing: [image: image/svg+xml, 6 bytes left out: "
        "'image/svg+xml' is not one of image/gif, image/jpeg, image/png, image/webp]"
    )


def test_a_data_url_image_becomes_its_bytes_and_other_schemes_are_left_out() -> None:
    inline = ImagePart(url="data:image/PNG;base64," + base64.b64encode(PNG).decode("ascii"))
    assert tool_content([inline]) == (CHART,)
    local = ImagePart(url="file:///etc/passwd")
    assert tool_content(["x", local]) == (
        "x[image: image/png left out: an image URL must be http(s) or a base64 data URL]"
    )
    with pytest.raises(UnsupportedToolResult, match=r"part 0: a data URL image must be data:<media type>;base64"):
        tool_content(ImagePart(url="data:image/png,rawbytes"))
    with pytest.raises(UnsupportedToolResult, match=r"part 0: the data URL's image is not base64"):
        tool_content(ImagePart(url="data:image/png;base64,%%%"))
    svg = "data:image/svg+xml;base64," + base64.b64encode(b"<svg/>").decode("ascii")
    assert tool_content(ImagePart(url=svg)) == (
        "[image: image/svg+xml, 6 bytes left out: "
        "'image/svg+xml' is not one of image/gif, image/jpeg, image/png, image/webp]"
    )


def test_part_shapes_are_checked_and_text_is_cleaned() -> None:
    # parts made without their checks (ImagePart(url=5) itself raises TypeError)
    with pytest.raises(UnsupportedToolResult, match=r"part 0: ImagePart.url is a int, not a str"):
        tool_content(unchecked(ImagePart, url=5))
    with pytest.raises(UnsupportedToolResult, match=r"part 1: TextPart.text is a bytes"):
        tool_content([CHART, unchecked(TextPart, text=b"x")])
    buffer = ImagePart(data=bytearray(PNG))  # type: ignore[arg-type]
    assert tool_content(["lone \udc80", buffer]) == (TextPart("lone \ufffd"), CHART)


# the message itself ------------------------------------------------------------


def test_a_tool_message_takes_parts_and_cleans_them() -> None:
    message = ToolMessage("c\udc80", "shot", [TextPart("bad \udc80"), CHART])
    assert message.content == (TextPart("bad \udc80"), CHART)
    assert message.text == "bad \udc80"
    cleaned = clean_message(message)
    assert cleaned == ToolMessage("c\ufffd", "shot", (TextPart("bad \ufffd"), CHART))
    tidy = ToolMessage("c", "shot", (TextPart("fine"), CHART), ToolStatus.FAILED)
    assert clean_message(tidy) is tidy
    with pytest.raises(TypeError, match="unsupported content part"):
        ToolMessage("c", "shot", [CHART, 3])  # type: ignore[list-item]


# codecs ------------------------------------------------------------------------


WITH_IMAGES = ToolMessage("c1", "shot", (TextPart("screen:"), CHART, REMOTE), ToolStatus.FAILED)


def test_a_result_with_images_round_trips_on_the_wire_and_in_events() -> None:
    encoded = wire.encode_message(WITH_IMAGES)
    assert encoded["content"][1] == {
        "type": "image",
        "url": None,
        "data": "iVBORw0KGgoAAQIDBAUGBwgJCgsMDQ4PEBESExQVFhc=",
        "media_type": "image/png",
    }
    assert wire.decode_message(json.loads(json.dumps(encoded))) == WITH_IMAGES
    event = ToolCompletedEvent(call=ToolCall("c1", "shot"), result=WITH_IMAGES, session_id="s", request_id="r")
    assert wire.loads(wire.dumps(event)) == event
    plain = ToolMessage("c2", "t", "text only")
    assert wire.encode_message(plain)["content"] == "text only"
    assert wire.decode_message(wire.encode_message(plain)) == plain


def test_the_wire_refuses_malformed_tool_content_with_its_path() -> None:
    body = {"role": "tool", "tool_call_id": "c", "name": "t", "status": "succeeded"}
    with pytest.raises(wire.WireFormatError, match=r"message.content: expected a string or an array of parts"):
        wire.decode_message({**body, "content": 5})
    with pytest.raises(wire.WireFormatError, match=r"message.content\[0\].data: not base64 text"):
        wire.decode_message({**body, "content": [{"type": "image", "data": "%%", "media_type": "image/png"}]})


def test_the_event_schema_allows_parts_in_tool_results() -> None:
    schema = json.loads((Path(__file__).parents[1] / "schema" / "events.json").read_text())
    content = schema["$defs"]["ToolMessage"]["properties"]["content"]
    assert content == {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/ContentPart"}}]}


def test_the_store_codec_round_trips_parts_and_reads_rows_written_before_them() -> None:
    assert decode_message(encode_message(WITH_IMAGES)) == WITH_IMAGES
    older = '{"role": "tool", "tool_call_id": "c", "name": "t", "content": "ok", "status": "succeeded"}'
    assert decode_message(older) == ToolMessage("c", "t", "ok")
    with pytest.raises(UndecodableMessage, match="tool content must be text or a list of parts, got int"):
        decode_message('{"role": "tool", "tool_call_id": "c", "name": "t", "content": 1, "status": "succeeded"}')


async def test_a_session_with_an_image_result_is_stored_in_sqlite_and_resumed_with_it(tmp_path: Path) -> None:
    @tool
    def plot() -> list[object]:
        """Draw."""
        return ["chart:", CHART]

    db = tmp_path / "sessions.db"
    first = ScriptedModel([AssistantMessage("", (ToolCall("p", "plot"),)), AssistantMessage("drawn")])
    agent = await create_agent(first, tools=[plot], history=None, extensions=[SQLiteSessionStore(db)])
    with trio.fail_after(10):
        await agent.run("draw", config=AgentRunConfig("s1"))
    second = ScriptedModel([AssistantMessage("again")])
    resumed = await create_agent(second, tools=[plot], history=None, extensions=[SQLiteSessionStore(db)])
    with trio.fail_after(10):
        await resumed.run("more", config=AgentRunConfig("s1"))
    results = [m for m in second.requests[0].messages if isinstance(m, ToolMessage)]
    assert results == [ToolMessage("p", "plot", (TextPart("chart:"), CHART))]
    rows = SQLiteSessionStore(db).messages("s1")
    assert [m for m in rows if isinstance(m, ToolMessage)] == results


# readers that cannot see images ---------------------------------------------------


def test_compaction_counts_images_and_its_transcript_describes_them() -> None:
    plain = ToolMessage("c", "shot", "x" * 40)
    assert estimate_tokens([plain]) == 10
    assert estimate_tokens([ToolMessage("c", "shot", (TextPart("x" * 40), CHART, CHART))]) == 10 + 2 * IMAGE_TOKENS
    assert transcript([WITH_IMAGES]) == (
        f"[tool result shot (failed)]: screen:[image: image/png, {len(PNG)} bytes]"
        "[image: image/jpeg, https://example.test/chart.jpg]"
    )


def test_the_cli_result_line_describes_images() -> None:
    line = result_line(ToolMessage("c", "shot", (TextPart("saved "), CHART)))
    assert line == f"shot succeeded: saved [image: image/png, {len(PNG)} bytes]"

"""What the model reads of MCP tool results, tool names it is offered, and server descriptions that are refused."""

from __future__ import annotations

import base64
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -e '.[mcp]')")

import mcp_types

from orchestrator.extensions.mcp import HttpServer, MCPExtension, StdioServer
from orchestrator.extensions.mcp.connection import describe_error, offered_name
from orchestrator.extensions.mcp.results import as_text, result_parts, tool_result
from orchestrator.messages import ImagePart, TextPart

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


def result(*content: Any, structured: Any = None, error: bool = False) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=list(content), structured_content=structured, is_error=error)


def test_text_and_images_become_parts_in_the_servers_order() -> None:
    image = mcp_types.ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png")
    parts = result_parts(result(mcp_types.TextContent(text="look:"), image, mcp_types.TextContent(text="done")))
    assert parts == (TextPart("look:"), ImagePart(data=PNG, media_type="image/png"), TextPart("done"))
    assert as_text(parts) == f"look:\n[image: image/png, {len(PNG)} bytes]\ndone"


def test_content_that_is_not_text_or_an_image_is_described() -> None:
    audio = mcp_types.AudioContent(data=base64.b64encode(b"RIFF1234").decode(), mime_type="audio/wav")
    broken = mcp_types.ImageContent(data="not base64!", mime_type="image/png")
    link = mcp_types.ResourceLink(name="report", uri="file:///r.pdf", mime_type="application/pdf", description="Q3")
    text = mcp_types.EmbeddedResource(
        resource=mcp_types.TextResourceContents(uri="file:///a.txt", mime_type="text/plain", text="alpha")
    )
    blob = mcp_types.EmbeddedResource(
        resource=mcp_types.BlobResourceContents(uri="file:///b.bin", blob=base64.b64encode(b"xyz").decode())
    )
    assert as_text(result_parts(result(audio, broken, link, text, blob))).split("\n") == [
        "[audio: audio/wav, 8 bytes]",
        "[image: image/png, invalid base64 data]",
        "[resource link: report <file:///r.pdf>, application/pdf: Q3]",
        "[resource <file:///a.txt>, text/plain]",
        "alpha",
        "[resource <file:///b.bin>, 3 bytes]",
    ]


def test_structured_content_is_added_unless_the_text_already_carries_it() -> None:
    weather = {"city": "Oslo", "celsius": 3}
    alone = result_parts(result(structured=weather))
    assert alone == (TextPart('{"celsius": 3, "city": "Oslo"}'),)
    as_json = result_parts(result(mcp_types.TextContent(text='{"celsius":3,"city":"Oslo"}'), structured=weather))
    assert as_json == (TextPart('{"celsius":3,"city":"Oslo"}'),)
    quoted = result_parts(result(mcp_types.TextContent(text="line one\n"), structured={"content": "line one\n"}))
    assert quoted == (TextPart("line one\n"),)
    other = result_parts(result(mcp_types.TextContent(text="see data"), structured=weather))
    assert other == (TextPart("see data"), TextPart('{"celsius": 3, "city": "Oslo"}'))


def test_a_long_result_is_cut_saying_so() -> None:
    text = as_text((TextPart("x" * 30), TextPart("y" * 20)), limit=40)
    assert text == "x" * 30 + "\n" + "y" * 10 + "\n[cut: the result has 50 characters of text; the first 40 are shown]"


def test_a_result_with_images_is_a_tool_result_of_parts_and_an_error_result_is_failed() -> None:
    image = mcp_types.ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png")
    with_image = tool_result(result(mcp_types.TextContent(text="look:"), image, mcp_types.TextContent(text="done")))
    assert with_image.status == "succeeded"
    assert with_image.content == (TextPart("look:"), TextPart("\n"), ImagePart(data=PNG), TextPart("\ndone"))
    failed = tool_result(result(mcp_types.TextContent(text="no such city"), error=True))
    assert (failed.content, failed.status) == ("no such city", "failed")
    text_only = tool_result(result(mcp_types.TextContent(text="a"), mcp_types.TextContent(text="b")))
    assert (text_only.content, text_only.status) == ("a\nb", "succeeded")


def test_offered_names_carry_the_prefix_and_only_characters_providers_accept() -> None:
    assert offered_name("fs__", "read_file") == "fs__read_file"
    assert offered_name("", "get-sum") == "get-sum"
    assert offered_name("x_", "a.b/c d") == "x_a_b_c_d"
    assert offered_name("p_", "n" * 100) == "p_" + "n" * 62


def test_errors_are_described_from_inside_exception_groups() -> None:
    group = ExceptionGroup("outer", [ExceptionGroup("inner", [ConnectionResetError("peer reset")])])
    assert describe_error(group) == "ConnectionResetError: peer reset"
    assert describe_error(TimeoutError()) == "TimeoutError"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: StdioServer(name="", command="x"), "server name"),
        (lambda: StdioServer(name="a b", command="x"), "server name"),
        (lambda: StdioServer(name="a", command="x", call_timeout=0), "call_timeout"),
        (lambda: StdioServer(name="a", command="x", connect_timeout=-1), "connect_timeout"),
        (lambda: StdioServer(name="a", command="x", args="--flag"), "sequence of strings"),
        (lambda: StdioServer(name="a", command="x", env={"A": 1}), "strings to strings"),
        (lambda: HttpServer(name="a", url="ftp://host/mcp"), "http:// or https://"),
        (lambda: HttpServer(name="a", url="http://h/mcp", headers={"X": None}), "strings to strings"),
        (lambda: MCPExtension([StdioServer(name="a", command="x"), HttpServer(name="a", url="http://h")]), "two MCP"),
        (lambda: MCPExtension(["node server.js"]), "not an MCP server description"),
    ],
)
def test_server_descriptions_that_cannot_work_are_refused_up_front(make: Any, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_the_default_prefix_is_the_server_name() -> None:
    assert StdioServer(name="files", command="x").tool_prefix == "files__"
    assert HttpServer(name="web", url="https://h/mcp", prefix="").tool_prefix == ""


def test_a_tool_is_offered_with_its_schema_as_given_and_a_long_description_cut() -> None:
    from orchestrator.extensions.mcp.connection import MAX_DESCRIPTION_CHARS, MCPConnection

    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}, "required": ["q"]}
    tool = mcp_types.Tool(name="search", description="d" * (MAX_DESCRIPTION_CHARS + 5), input_schema=schema)
    definition = MCPConnection(StdioServer(name="s", command="x"))._definition("s__search", tool)
    assert definition.name == "s__search" and definition.parameters == schema
    assert definition.description == "d" * MAX_DESCRIPTION_CHARS + " [description cut]"

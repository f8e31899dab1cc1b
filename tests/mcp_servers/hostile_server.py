"""A hostile MCP server over stdio, in plain JSON-RPC: ``python hostile_server.py [options]``.

Options: ``--tools N`` lists N more tools (``t0``, ``t1``, ...) in one page;
``--fat-schema BYTES`` lists a tool ``fat`` whose input schema has about that
many bytes; ``--stderr BYTES`` writes that many bytes to stderr before it
answers anything (ending with the line ``hostile: spam ends``); ``--ledger
PATH`` appends the method of every message it reads to PATH, one a line.

Its tools: ``echo(text)`` answers the text; ``huge(size, id_at)`` answers a
text of ``size`` bytes, its ``id`` first (``"first"``), last (``"last"``, as
servers built on the TypeScript SDK write it) or nowhere (``"none"``: an answer
no request can be matched to), or sends a log notification of ``size`` bytes
and then answers ``"after the notification"`` (``"notification"``); ``spam(size)`` writes ``size`` bytes to stderr,
then answers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PROTOCOL = "2025-06-18"
CHUNK = 1 << 20

SIMPLE_SCHEMA: dict[str, Any] = {"type": "object"}
TOOLS: list[dict[str, Any]] = [
    {
        "name": "echo",
        "description": "Answers the text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
    {
        "name": "huge",
        "description": "Answers a text of `size` bytes; its id first, last or nowhere.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "size": {"type": "integer"},
                "id_at": {"enum": ["first", "last", "none", "notification"]},
            },
            "required": ["size"],
        },
    },
    {
        "name": "spam",
        "description": "Writes `size` bytes to stderr, then answers.",
        "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]},
    },
]


def send(data: bytes) -> None:
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def answer(request: int | str, result: dict[str, Any]) -> None:
    send(json.dumps({"jsonrpc": "2.0", "id": request, "result": result}).encode())


def spam(size: int) -> None:
    line = b"hostile: spam spam spam spam spam spam spam spam spam spam spam spam spam spam spam spam\n"
    block = line * (CHUNK // len(line))
    left = size
    while left > 0:
        sys.stderr.buffer.write(block[:left])
        left -= len(block)
    sys.stderr.buffer.write(b"hostile: spam ends\n")
    sys.stderr.buffer.flush()


def huge(request: int | str, size: int, id_at: str) -> None:
    """A text result of ``size`` bytes, written in pieces (never held twice)."""
    text_start = b'{"content":[{"type":"text","text":"'
    text_end = b'"}],"isError":false}'
    ident = json.dumps(request).encode()
    if id_at == "notification":
        start, end = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"', b'"}}'
    elif id_at == "first":
        start, end = b'{"jsonrpc":"2.0","id":' + ident + b',"result":' + text_start, text_end + b"}"
    elif id_at == "last":
        start, end = b'{"result":' + text_start, text_end + b',"jsonrpc":"2.0","id":' + ident + b"}"
    else:
        start, end = b'{"jsonrpc":"2.0","result":' + text_start, text_end + b"}"
    out = sys.stdout.buffer
    out.write(start)
    block = b"x" * CHUNK
    left = size
    while left > 0:
        out.write(block[:left])
        left -= CHUNK
    out.write(end + b"\n")
    out.flush()
    if id_at == "notification":
        answer(request, {"content": [{"type": "text", "text": "after the notification"}]})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--fat-schema", type=int, default=0)
    parser.add_argument("--stderr", type=int, default=0)
    parser.add_argument("--ledger", type=Path)
    options = parser.parse_args()
    if options.stderr:
        spam(options.stderr)
    tools = list(TOOLS)
    if options.fat_schema:
        tools.append({"name": "fat", "inputSchema": {"type": "object", "description": "f" * options.fat_schema}})
    tools.extend({"name": f"t{index}", "inputSchema": SIMPLE_SCHEMA} for index in range(options.tools))

    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        if options.ledger is not None:
            with options.ledger.open("a") as ledger:
                ledger.write(f"{method}\n")
        request = message.get("id")
        if request is None:
            continue  # a notification
        params = message.get("params") or {}
        if method == "initialize":
            answer(
                request,
                {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "1.0.0"},
                },
            )
        elif method == "ping":
            answer(request, {})
        elif method == "tools/list":
            answer(request, {"tools": tools})
        elif method == "tools/call":
            arguments = params.get("arguments") or {}
            name = params.get("name")
            if name == "echo":
                answer(request, {"content": [{"type": "text", "text": str(arguments.get("text"))}]})
            elif name == "huge":
                huge(request, int(arguments["size"]), str(arguments.get("id_at", "first")))
            elif name == "spam":
                spam(int(arguments["size"]))
                answer(request, {"content": [{"type": "text", "text": "spammed"}]})
            else:
                answer(request, {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True})
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
            send(json.dumps({"jsonrpc": "2.0", "id": request, "error": error}).encode())


if __name__ == "__main__":
    main()

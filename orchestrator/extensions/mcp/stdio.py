"""The stdio transport: a server process spoken to in newline-delimited JSON-RPC, every read bounded.

Lines are read in linear time, each at most the server's ``max_message_bytes``
long. A longer line is never held: its first and last bytes are searched for
the request it answers, that request gets an error answer naming the cap
(``MESSAGE_TOO_LARGE``) and the rest of the line is read and discarded; one
that answers no request it can be matched to ends the connection, saying why.
Large lines are decoded in a worker thread so the event loop goes on, and a
tool listing longer than ``max_tools`` is cut there, before the SDK reads it.
Stderr is read into a ``StderrLog`` that keeps its last ``max_stderr_bytes``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import mcp_types
import trio
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from orchestrator.extensions.mcp.servers import StdioServer

log = logging.getLogger("orchestrator.mcp")

#: The code of the error answer a call gets when the server's answer was larger than its max_message_bytes.
MESSAGE_TOO_LARGE = -32019
#: How many bytes at the start and at the end of a too large message are searched for its id.
SEARCHED_BYTES = 4096
#: Lines longer than this are decoded in a worker thread rather than on the event loop.
PARSE_ON_LOOP_BYTES = 64 * 1024
#: How long the end of stdout waits for stderr's end, so that a failure quotes the server's last words.
STDERR_SETTLE = 0.5
#: The server's grace to exit once its stdin is closed, then after SIGTERM (before SIGKILL).
EXIT_GRACE = 2.0
#: How long already accepted messages may take to be written when the transport closes.
FLUSH_GRACE = 0.5

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_ID_VALUE = re.compile(r'\s*:\s*(-?\d+(?![\d.eE])|"[^"\\]*(?:\\.[^"\\]*)*")')
_ID_AT_END = re.compile(r'"id"\s*:\s*(-?\d+|"[^"\\]*(?:\\.[^"\\]*)*")\s*\}\s*$')
_KEY = re.compile(r"\s*:")

Broken = Callable[[str], None]
Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


class StderrLog:
    """The last ``limit`` bytes a server wrote to stderr, and how many bytes before them were dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.dropped = 0
        self._kept = bytearray()

    def add(self, chunk: bytes) -> None:
        self._kept += chunk
        extra = len(self._kept) - self.limit
        if extra > 0:
            del self._kept[:extra]
            self.dropped += extra

    @property
    def kept(self) -> int:
        return len(self._kept)

    def tail(self, size: int) -> str:
        """Its last ``size`` bytes as text, stripped."""
        return bytes(self._kept[-size:]).decode("utf-8", errors="replace").strip()

    def text(self) -> str:
        """What is kept, as text, after a line saying how many earlier bytes were dropped (if any)."""
        kept = bytes(self._kept).decode("utf-8", errors="replace")
        return f"[{self.dropped} earlier bytes dropped]\n{kept}" if self.dropped else kept


def _json(text: str) -> Any:
    """The JSON value ``text`` holds, or None when it holds none."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def _top_level(head: str) -> tuple[set[str], int | str | None]:
    """The keys of the top-level object that ``head`` (a message's start) shows, and its ``id`` if shown."""
    keys: set[str] = set()
    found: int | str | None = None
    depth = 0
    index = 0
    while index < len(head):
        character = head[index]
        if character == '"':
            string = _STRING.match(head, index)
            if string is None:
                break  # the string goes on past the head
            index = string.end()
            if depth == 1 and _KEY.match(head, index):
                key = _json(string.group())
                if isinstance(key, str):
                    keys.add(key)
                if key == "id" and (value := _ID_VALUE.match(head, index)) is not None:
                    found = _json(value.group(1))
            continue
        if character in "{[":
            depth += 1
        elif character in "}]":
            depth -= 1
        index += 1
    return keys, found


def _cut_tools(value: dict[str, Any], keep: int) -> None:
    """Cut a listing's ``result.tools`` to its first ``keep`` (one more than max_tools says there were more)."""
    result = value.get("result")
    tools = result.get("tools") if isinstance(result, dict) else None
    if isinstance(result, dict) and isinstance(tools, list) and len(tools) > keep:
        result["tools"] = tools[:keep]


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")
Inner = Callable[[str, str, int], tuple[Any, int]]


def _skip(text: str, index: int, expected: str = "") -> int:
    """The index past the blanks at ``index`` (and past ``expected`` after them, which must be there)."""
    index = _SPACE.match(text, index).end()  # type: ignore[union-attr]  # \s* always matches
    if expected:
        if not text.startswith(expected, index):
            raise ValueError(f"expected {expected!r} at character {index}")
        index = _SPACE.match(text, index + len(expected)).end()  # type: ignore[union-attr]
    return index


def _value(key: str, text: str, index: int) -> tuple[Any, int]:
    value, end = _DECODER.raw_decode(text, index)
    return value, end


def _object(text: str, index: int, inner: Inner) -> tuple[dict[str, Any], int]:
    """The object at ``index`` and the index past it, each member's value decoded by ``inner``."""
    found: dict[str, Any] = {}
    index = _skip(text, index, "{")
    if text.startswith("}", index):
        return found, index + 1
    while True:
        key, index = _DECODER.raw_decode(text, index)
        if not isinstance(key, str):
            raise ValueError(f"an object key must be a string, at character {index}")
        found[key], index = inner(key, text, _skip(text, index, ":"))
        index = _skip(text, index)
        if text.startswith("}", index):
            return found, index + 1
        index = _skip(text, index, ",")


def _array_cut(text: str, index: int, keep: int) -> tuple[list[Any], int]:
    """The first ``keep`` items of the array at ``index``, and the index past it; the others decoded one at a time
    and dropped at once, so that they never exist together."""
    kept: list[Any] = []
    index = _skip(text, index, "[")
    if text.startswith("]", index):
        return kept, index + 1
    while True:
        item, index = _DECODER.raw_decode(text, index)
        if len(kept) < keep:
            kept.append(item)
        index = _skip(text, index)
        if text.startswith("]", index):
            return kept, index + 1
        index = _skip(text, index, ",")


def _decoded_with_tools_cut(text: str, keep: int) -> Any:
    """The JSON value of ``text``, its ``result.tools`` (if an array) cut to ``keep`` items while it is decoded."""

    def tools(key: str, text: str, index: int) -> tuple[Any, int]:
        if key == "tools" and text.startswith("[", index):
            return _array_cut(text, index, keep)
        return _value(key, text, index)

    def result(key: str, text: str, index: int) -> tuple[Any, int]:
        if key == "result" and text.startswith("{", index):
            return _object(text, index, tools)
        return _value(key, text, index)

    start = _skip(text, 0)
    if not text.startswith("{", start):
        return json.loads(text)
    value, end = _object(text, start, result)
    if _skip(text, end) != len(text):
        raise ValueError(f"extra data after the message at character {end}")
    return value


class _Oversized:
    """A line past the cap, under way: its first bytes, its last bytes, its size so far."""

    def __init__(self, parts: Iterable[bytes]) -> None:
        head = bytearray()
        self.size = 0
        self.tail = b""
        for part in parts:
            if len(head) < SEARCHED_BYTES:
                head += part[: SEARCHED_BYTES - len(head)]
            self.add(part)
        self.keys, self.id = _top_level(bytes(head).decode("utf-8", errors="replace"))
        self.answered = False

    def add(self, part: bytes) -> None:
        self.size += len(part)
        self.tail = (self.tail + part[-SEARCHED_BYTES:])[-SEARCHED_BYTES:]

    @property
    def is_response(self) -> bool:
        return "method" not in self.keys and ("result" in self.keys or "error" in self.keys)

    def answered_id(self) -> int | str | None:
        """The id of the request this (finished) line answers, or None when it cannot be told."""
        if "method" in self.keys:
            return None
        if self.id is not None:
            return self.id
        at_end = _ID_AT_END.search(self.tail.decode("utf-8", errors="replace"))
        found = _json(at_end.group(1)) if at_end is not None else None
        return found if isinstance(found, (int, str)) else None


class _Pipes:
    """The tasks between one server process and the session's streams."""

    def __init__(self, server: StdioServer, process: Process, stderr: StderrLog, broken: Broken) -> None:
        self.server = server
        self.process = process
        self.stderr = stderr
        self.broken = broken
        self.to_session, self.read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.write_stream, self.from_session = anyio.create_memory_object_stream[SessionMessage](0)
        self.listings: set[int | str] = set()  # ids of tools/list requests not answered yet
        self.stderr_ended = anyio.Event()
        self.writer_done = anyio.Event()
        self.delivering = True

    # --- stdout -------------------------------------------------------------------------------

    async def read(self) -> None:
        """Read lines until stdout ends, delivering each message; past an unrecoverable one, only discard."""
        stdout = self.process.stdout
        assert stdout is not None
        cap = self.server.max_message_bytes
        parts: list[bytes] = []
        size = 0
        oversized: _Oversized | None = None
        try:
            async for chunk in _chunks(stdout):
                if not self.delivering:
                    continue
                start = 0
                while self.delivering:
                    end = chunk.find(b"\n", start)
                    piece = chunk[start:] if end < 0 else chunk[start:end]
                    if oversized is not None:
                        oversized.add(piece)
                    elif size + len(piece) > cap:
                        oversized = _Oversized([*parts, piece])
                        parts, size = [], 0
                        if oversized.is_response and oversized.id is not None:
                            await self._refuse(oversized, oversized.id)
                    else:
                        parts.append(piece)
                        size += len(piece)
                    if end < 0:
                        break
                    if oversized is not None:
                        await self._finish(oversized)
                        oversized = None
                    else:
                        line = b"".join(parts)
                        parts, size = [], 0
                        if line.strip():
                            await self._deliver(await self._parse(line))
                    start = end + 1
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(STDERR_SETTLE):
                await self.stderr_ended.wait()
            await self.to_session.aclose()

    async def _deliver(self, item: SessionMessage | Exception) -> None:
        try:
            await self.to_session.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.delivering = False  # the session is gone: the rest is only drained

    async def _refuse(self, oversized: _Oversized, request: int | str) -> None:
        """Answer ``request`` with an error naming the cap (once)."""
        if oversized.answered:
            return
        oversized.answered = True
        self.listings.discard(request)
        cap = self.server.max_message_bytes
        log.warning("MCP server %s: an answer of more than %d bytes (max_message_bytes) dropped", self.server.name, cap)
        error = mcp_types.ErrorData(
            code=MESSAGE_TOO_LARGE,
            message=f"the server's answer has more than {cap} bytes (its max_message_bytes); it was dropped",
            data={"max_message_bytes": cap},
        )
        await self._deliver(SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request, error=error)))

    async def _finish(self, oversized: _Oversized) -> None:
        """A too large line ended: answer its request, drop it, or end the connection when it cannot be told."""
        if oversized.answered:
            return
        cap = self.server.max_message_bytes
        request = oversized.answered_id()
        if request is not None:
            await self._refuse(oversized, request)
        elif "method" in oversized.keys:
            log.warning(
                "MCP server %s: a message of %d bytes, more than max_message_bytes (%d), dropped",
                self.server.name,
                oversized.size,
                cap,
            )
        else:
            self.broken(
                f"sent a message of {oversized.size} bytes, more than its max_message_bytes ({cap}), "
                "that could not be matched to a request; the connection was ended"
            )
            self.delivering = False
            await self.to_session.aclose()

    async def _parse(self, line: bytes) -> SessionMessage | Exception:
        if len(line) > PARSE_ON_LOOP_BYTES:  # the thread is waited for: its work is bounded by max_message_bytes
            return await trio.to_thread.run_sync(self._parsed, line)
        return self._parsed(line)

    def _parsed(self, line: bytes) -> SessionMessage | Exception:
        """One line's message, or the error that says why it is none (the session reports it).

        While a tool listing is awaited, a large line is decoded with its ``result.tools`` cut as they are
        read, so that a huge listing never exists whole; a line that turns out to answer something else
        is decoded again, whole.
        """
        try:
            if self.listings and len(line) > PARSE_ON_LOOP_BYTES:
                value = _decoded_with_tools_cut(line.decode(), self.server.max_tools + 1)
                if not self._answers_listing(value):
                    value = json.loads(line)
            else:
                value = json.loads(line)
                if self._answers_listing(value):
                    _cut_tools(value, self.server.max_tools + 1)
            return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_python(value, by_name=False))
        except ValueError as error:
            log.warning("MCP server %s sent a line that is no JSON-RPC message: %s", self.server.name, error)
            return error

    def _answers_listing(self, value: Any) -> bool:
        """Whether ``value`` answers a tools/list request (which is then no longer awaited)."""
        request = value.get("id") if isinstance(value, dict) else None
        if not isinstance(request, (int, str)) or request not in self.listings:
            return False
        self.listings.discard(request)
        return True

    # --- stdin and stderr ---------------------------------------------------------------------

    async def write(self) -> None:
        """Write the session's messages to stdin, one a line; a broken stdin ends the connection."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            async with self.from_session:
                async for item in self.from_session:
                    message = item.message
                    if isinstance(message, mcp_types.JSONRPCRequest) and message.method == "tools/list":
                        self.listings.add(message.id)
                    await stdin.send((message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await self.to_session.aclose()
        finally:
            self.writer_done.set()

    async def keep_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        try:
            async for chunk in _chunks(stderr):
                self.stderr.add(chunk)
        finally:
            self.stderr_ended.set()

    async def stop(self) -> None:
        """Stop the traffic, let accepted messages be written, then close stdin and stop the process (bounded)."""
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(FLUSH_GRACE):
            await self.writer_done.wait()
        assert self.process.stdin is not None
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self.process.stdin.aclose()
        with anyio.move_on_after(EXIT_GRACE):
            while self.process.returncode is None:  # not wait(): that may also wait for pipes a child holds
                await anyio.sleep(0.01)
        if self.process.returncode is None:
            await terminate_posix_process_tree(self.process, EXIT_GRACE)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await pipe.aclose()
        for stream in (self.read_stream, self.write_stream, self.to_session, self.from_session):
            await stream.aclose()


async def _chunks(stream: ByteReceiveStream) -> AsyncIterator[bytes]:
    """The chunks of a pipe until it ends or is closed."""
    while True:
        try:
            yield await stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            return


@asynccontextmanager
async def stdio_transport(
    server: StdioServer, stderr: StderrLog, broken: Broken
) -> AsyncIterator[Streams]:
    """Start ``server``'s command and yield its (read, write) streams; the process is stopped on exit.

    ``broken`` is told why, when the transport ends the connection itself.
    """
    process = await anyio.open_process(
        [server.command, *server.args],
        env=get_default_environment() | dict(server.env or {}),
        cwd=server.cwd,
        start_new_session=True,
    )
    # No awaits until the task group is entered: a cancellation in between would leave the process running.
    pipes = _Pipes(server, process, stderr, broken)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(pipes.keep_stderr)
        tasks.start_soon(pipes.read)
        tasks.start_soon(pipes.write)
        try:
            yield pipes.read_stream, pipes.write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await pipes.stop()
            tasks.cancel_scope.cancel()

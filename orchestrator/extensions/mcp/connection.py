"""One MCP server's connection: its machine, the task that holds the session, its tools and calls.

The session lives in a task of the extension's nursery (the SDK's task groups
must be entered and left by one task); requests call its tools from their own
tasks. Every wait is bounded: starting by ``connect_timeout``, each call by
``call_timeout``. A server that fails is left failed (its calls get failed
results) until the next request that needs it restarts it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Literal

import mcp_types
import pydantic
import trio
from mcp import Client, MCPError
from mcp.client.subscriptions import Subscription
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from machines.build import BoundMachine, Step
from machines.mcp_connection import MCP_CONNECTION
from orchestrator.events import MCPServerFailedEvent, MCPServerStartedEvent, TransitionEvent
from orchestrator.extensions.mcp.results import MAX_RESULT_CHARS, tool_result
from orchestrator.extensions.mcp.servers import MCPServer, StdioServer
from orchestrator.extensions.mcp.stdio import MESSAGE_TOO_LARGE, StderrLog
from orchestrator.extensions.mcp.transport import watched_transport
from orchestrator.tools import ToolDefinition, ToolResult

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

log = logging.getLogger("orchestrator.mcp")

#: How many bytes of a stdio server's stderr a failure quotes (its last ones).
STDERR_QUOTE = 2000
#: How many characters of a tool's description the model reads (every request carries them).
MAX_DESCRIPTION_CHARS = 10_000
#: At most this many pages of a tool listing are read.
MAX_TOOL_PAGES = 100

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")
_CONTEXT = " context"  # the handler's injected parameter: no tool argument can be named so

CLIENT_INFO = mcp_types.Implementation(name="orchestrator", version="0.1.0")


def describe_error(error: BaseException) -> str:
    """One line about ``error``: the first real failure inside exception groups, cancellations left out."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            if not isinstance(inner, trio.Cancelled):
                return describe_error(inner)
    if isinstance(error, MCPError):
        return f"MCP error {error.code}: {error.message}"
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _too_large(error: MCPError) -> bool:
    """Whether ``error`` is the stdio transport's answer in place of one larger than max_message_bytes."""
    return error.code == MESSAGE_TOO_LARGE and isinstance(error.data, dict) and "max_message_bytes" in error.data


def offered_name(prefix: str, name: str) -> str:
    """The name a server's tool is offered under: the prefix and its name, cut to what providers accept."""
    full = prefix + name
    if _TOOL_NAME.fullmatch(full):
        return full
    return _NOT_IN_NAME.sub("_", full)[:64] or "_"


class Session:
    """One start of a server: the task that holds its client, its tools, and how it ended."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.scope = trio.CancelScope()
        self.ended = trio.Event()
        self.client: Client | None = None
        self.tools: dict[str, mcp_types.Tool] = {}  # offered name -> the server's tool
        self.stale = False  # the server said its tools changed
        self.stderr = StderrLog(server.max_stderr_bytes) if isinstance(server, StdioServer) else None
        self.broken: str | None = None  # why the transport ended the connection itself
        self.info = ""
        self.protocol_version = ""

    def stderr_tail(self) -> str:
        """The last bytes the server wrote to stderr (as text), or ""."""
        return "" if self.stderr is None else self.stderr.tail(STDERR_QUOTE)

    def _broke(self, reason: str) -> None:
        self.broken = reason

    def explain(self, reason: str) -> str:
        tail = self.stderr_tail()
        return f"{reason}; its stderr ends with: {tail}" if tail else reason

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.stale = True

    async def _subscribe_to_tool_changes(self, stack: AsyncExitStack, client: Client) -> Subscription | None:
        """Ask the server to say when its tools change (protocol 2026-07-28 and later), once it acknowledged.

        Earlier versions send the notification unasked (see ``_on_message``). A
        server that refuses the subscription only loses this refresh.
        """
        if self.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return None
        try:
            return await stack.enter_async_context(client.listen(tools_list_changed=True))
        except Exception as error:
            log.debug("MCP server %s: no tool change subscription: %s", self.server.name, describe_error(error))
            return None

    async def _watch_tool_changes(self, changes: Subscription) -> None:
        """Mark the tools stale whenever the server says they changed; a dropped subscription ends the watch."""
        try:
            async for _ in changes:
                self.stale = True
        except Exception as error:
            log.debug("MCP server %s: tool change subscription lost: %s", self.server.name, describe_error(error))

    async def list_tools(self) -> None:
        """Read the tool listing into ``tools``: its first ``max_tools`` tools, those with too large schemas left out.

        Pages are read until there are more tools than that (or MAX_TOOL_PAGES);
        what is left out is said in one warning.
        """
        assert self.client is not None
        limit = self.server.max_tools
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await self.client.list_tools(cursor=cursor, cache_mode="refresh")
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(listed) > limit:
                break
        found: dict[str, mcp_types.Tool] = {}
        oversized: list[str] = []
        for tool in listed[:limit]:
            if len(json.dumps(tool.input_schema, ensure_ascii=False).encode()) > self.server.max_schema_bytes:
                oversized.append(tool.name)
                continue
            name = offered_name(self.server.tool_prefix, tool.name)
            if name in found:
                log.warning("MCP server %s: tool %r clashes as %r", self.server.name, tool.name, name)
                continue
            found[name] = tool
        self._warn_left_out(len(listed) > limit, oversized)
        self.tools = found
        self.stale = False

    def _warn_left_out(self, cut: bool, oversized: list[str]) -> None:
        said: list[str] = []
        if cut:
            said.append(f"it lists more than {self.server.max_tools} tools (max_tools); only the first are offered")
        if oversized:
            names = ", ".join(repr(name) for name in oversized[:10]) + (", ..." if len(oversized) > 10 else "")
            said.append(
                f"{len(oversized)} tools have input schemas of more than {self.server.max_schema_bytes} bytes "
                f"(max_schema_bytes) and are left out: {names}"
            )
        if said:
            log.warning("MCP server %s: %s", self.server.name, "; ".join(said))

    async def run(self, connection: MCPConnection, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Start the server and hold its session until it ends by itself or the scope is cancelled."""
        reason = await self._hold(connection, task_status)
        if reason is not None:
            connection.lost(self, self.explain(reason))

    async def _hold(self, connection: MCPConnection, task_status: Any) -> str | None:
        """Why the session ended by itself, or None when it was stopped or has been reported already.

        Before ``started`` every error reaches the caller (the start failed);
        after it, none does: the extension's nursery must outlive any server.
        """
        started = False
        try:
            with self.scope:
                client = Client(
                    watched_transport(self.server, self.ended, self.stderr, self._broke),
                    client_info=CLIENT_INFO,
                    message_handler=self._on_message,
                    cache=None,
                )
                async with client:
                    self.client = client
                    info = client.server_info
                    self.info = f"{info.name} {info.version}".strip() if info is not None else ""
                    self.protocol_version = client.protocol_version
                    await self.list_tools()
                    async with AsyncExitStack() as subscription, trio.open_nursery() as watching:
                        changes = await self._subscribe_to_tool_changes(subscription, client)
                        started = True
                        task_status.started()
                        if changes is not None:
                            watching.start_soon(self._watch_tool_changes, changes)
                        await self.ended.wait()
                        # told before the transport winds down (which may wait for the process to exit)
                        connection.lost(self, self.explain(self.broken or "the server closed its connection"))
                        watching.cancel_scope.cancel()
        except Exception as error:  # what is left once the scope took its own cancellation out
            if not started:
                raise
            return None if self.scope.cancel_called else self.broken or describe_error(error)
        finally:
            self.client = None
        return None


class MCPConnection:
    """One configured server: its connection machine, its current session, and the tools it offers."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.machine = BoundMachine(MCP_CONNECTION, {}, host=self)
        self.restarts = 0
        self.last_error = ""
        self.nursery: trio.Nursery | None = None
        self._current: Session | None = None
        self._unreported: tuple[str, Step] | None = None  # a failure (and its step) no request has streamed yet
        self._lock = trio.Lock()
        self._attempts = 0  # starts begun, so a request that waited for one does not begin another
        self._definitions: dict[str, ToolDefinition] = {}
        self._stderr: StderrLog | None = None  # the last start's

    @property
    def stderr(self) -> str:
        """What the server's last start wrote to stderr (its last ``max_stderr_bytes``, saying what was dropped)."""
        return "" if self._stderr is None else self._stderr.text()

    @property
    def state(self) -> str:
        return self.machine.state()

    @property
    def tools_changed(self) -> bool:
        """Whether the server said its tools changed since they were last read (the next request reads them)."""
        return self._current is not None and self._current.stale

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The tools offered while the server is ready (none otherwise)."""
        return tuple(self._definitions.values()) if self.state == "ready" else ()

    async def _step(self, context: AgentRunContext | None, trigger: str) -> None:
        step, _ = self.machine.fire(trigger)
        if context is not None:
            await context.emit(
                TransitionEvent(
                    machine=step.machine, region=step.region, source=step.source, trigger=step.trigger, dest=step.dest
                )
            )

    async def ensure(self, context: AgentRunContext) -> bool:
        """Make the server ready, starting or restarting it; whether it is ready.

        The request streams what happens: a failure noticed since the last
        request, the transitions, and ``mcp_server_started`` or ``mcp_server_failed``.
        A request that waited while another one's start failed does not start
        it again: it waits for one start at most.
        """
        attempts = self._attempts
        async with self._lock:
            if self._attempts != attempts and self.state == "failed":
                return False
            session = self._current
            if self.state == "ready" and session is not None:
                if session.stale:
                    await self._refresh(context, session)
                return self.state == "ready"
            if self.state == "closed" or self.nursery is None:
                return False
            await self._report_unreported(context, "idle")
            restarting = self.state == "failed"
            await self._step(context, "restart" if restarting else "start")
            if restarting:
                self.restarts += 1
            return await self._connect(context, self.nursery)

    async def _connect(self, context: AgentRunContext, nursery: trio.Nursery) -> bool:
        self._attempts += 1
        session = Session(self.server)
        self._current = session
        self._stderr = session.stderr
        try:
            with trio.fail_after(self.server.connect_timeout):
                await nursery.start(session.run, self)
        except trio.Cancelled:
            # The request that was starting it was cancelled: the start is abandoned; the next request retries.
            if self._current is session and self.state == "connecting":
                self._current = None
                self.last_error = "its start was cancelled"
                self.machine.fire("fail")
            raise
        except trio.TooSlowError:
            reason = session.explain(f"did not start within {self.server.connect_timeout:g} s")
        except Exception as error:
            reason = session.explain(f"could not start ({self.server.describe()}): {describe_error(error)}")
        else:
            if self.state != "connecting":
                return False  # closed meanwhile
            self._definitions = {name: self._definition(name, tool) for name, tool in session.tools.items()}
            await self._step(context, "establish")
            await context.emit(
                MCPServerStartedEvent(
                    server=self.server.name,
                    tools=tuple(session.tools),
                    server_info=session.info,
                    protocol_version=session.protocol_version,
                    restarts=self.restarts,
                )
            )
            return True
        self._current = None
        if self.state != "connecting":
            return False
        self.last_error = reason
        await self._step(context, "fail")
        await context.emit(MCPServerFailedEvent(server=self.server.name, error=reason, stage="connect"))
        return False

    async def _refresh(self, context: AgentRunContext, session: Session) -> None:
        """Re-read the tool listing after the server said it changed."""
        with trio.move_on_after(self.server.call_timeout) as waited:
            try:
                await session.list_tools()
            except Exception as error:
                await self._fail(context, session, f"could not list its tools again: {describe_error(error)}")
                return
        if waited.cancelled_caught:
            await self._fail(
                context, session, f"did not list its tools within {self.server.call_timeout:g} s", quote=False
            )
            return
        self._definitions = {name: self._definition(name, tool) for name, tool in session.tools.items()}

    async def _report_unreported(self, context: AgentRunContext, stage: Literal["idle", "call"]) -> None:
        """Stream a failure noticed while no request watched: its transition, then ``mcp_server_failed``."""
        unreported, self._unreported = self._unreported, None
        if unreported is not None:
            reason, step = unreported
            await context.emit(
                TransitionEvent(
                    machine=step.machine, region=step.region, source=step.source, trigger=step.trigger, dest=step.dest
                )
            )
            await context.emit(MCPServerFailedEvent(server=self.server.name, error=reason, stage=stage))

    def lost(self, session: Session, reason: str) -> None:
        """The session ended by itself (the server exited or dropped the connection); no request is told yet."""
        if self._current is not session or self.state != "ready":
            return
        self._current = None
        self.last_error = reason
        step, _ = self.machine.fire("fail")
        self._unreported = (reason, step)

    async def _fail(self, context: AgentRunContext, session: Session, reason: str, *, quote: bool = True) -> None:
        """A request found the server failed: stop its session and stream why (once), quoting its stderr."""
        if self._current is session and self.state == "ready":
            self._current = None
            self.last_error = session.explain(reason) if quote else reason
            session.scope.cancel()
            await self._step(context, "fail")
            await context.emit(MCPServerFailedEvent(server=self.server.name, error=self.last_error, stage="call"))
            return
        await self._report_unreported(context, "call")

    def _definition(self, name: str, tool: mcp_types.Tool) -> ToolDefinition:
        async def run(**values: Any) -> ToolResult:
            context: AgentRunContext = values.pop(_CONTEXT)
            return await self.call(context, name, values)

        description = tool.description or tool.title or f"{tool.name} (a tool of the MCP server {self.server.name})"
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[:MAX_DESCRIPTION_CHARS] + " [description cut]"
        return ToolDefinition(
            name=name,
            description=description,
            parameters=dict(tool.input_schema),
            handler=run,
            inject=((_CONTEXT, "context"),),
        )

    def _why(self) -> str:
        if self.state == "closed":
            return "its MCPExtension was closed"
        return self.last_error or "unknown reason"

    async def call(self, context: AgentRunContext, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call the tool offered as ``name``; every failure is a failed result, never a hang."""
        if not await self.ensure(context):
            return ToolResult(f"the MCP server {self.server.name!r} is not available: {self._why()}", "failed")
        session = self._current
        tool = session.tools.get(name) if session is not None else None
        if session is None or session.client is None or tool is None:
            return ToolResult(f"the MCP server {self.server.name!r} no longer offers the tool {name!r}", "failed")
        client = session.client
        limit = self.server.call_timeout
        with trio.move_on_after(limit) as waited:
            try:
                result = await client.call_tool(tool.name, dict(arguments))
            except MCPError as error:
                if _too_large(error):
                    return ToolResult(f"the MCP server {self.server.name!r} failed the call: {error.message}", "failed")
                if error.code != CONNECTION_CLOSED:
                    return ToolResult(f"the MCP server refused the call: {describe_error(error)}", "failed")
                await self._fail(context, session, session.broken or "the server closed its connection during the call")
                return ToolResult(f"the MCP server {self.server.name!r} failed: {self._why()}", "failed")
            except pydantic.ValidationError as error:
                first = error.errors()[0]["msg"] if error.errors() else str(error)
                return ToolResult(f"the MCP server's answer is not a valid tool result: {first}", "failed")
            except Exception as error:
                await self._fail(context, session, f"the call broke the connection: {describe_error(error)}")
                return ToolResult(f"the MCP server {self.server.name!r} failed: {self._why()}", "failed")
        if waited.cancelled_caught:
            await self._fail(context, session, f"did not answer a call of {tool.name} within {limit:g} s", quote=False)
            return ToolResult(f"the MCP server {self.server.name!r} failed: {self._why()}", "failed")
        return tool_result(result, MAX_RESULT_CHARS)

    async def close(self) -> None:
        """Close the connection from any state; its session (and process) stops."""
        if self.state != "closed":
            self.machine.fire("close")
        session, self._current = self._current, None
        if session is not None:
            session.scope.cancel()

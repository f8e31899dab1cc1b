"""Subagents: an Agent offered to another agent as a tool.

``agent_tool(researcher, name="research", description=...)`` is a
``SubAgentExtension``: given to the parent agent's ``extensions``, it offers a
tool ``research(task)``. A call runs one request of ``researcher`` in the
calling tool's own trio task, with ``task`` as its input (a blank task is a
failed result), in the child session ``child_session_id(parent_session,
tool_call_id)`` (``"<parent session>:<tool call id>"``; when that would pass
``CHILD_SESSION_ID_LIMIT``, the HTTP service's id limit, the parent's id cut
short, ``:~`` and a digest of both ids). Its answer is the
call's result; its failure is the call's failed result; cancelling the parent
cancels it.

While the child runs, its streamed events go on the parent's stream in order,
each keeping its own ``session_id`` and ``request_id`` (the child's) and taking
the parent's next ``seq``. ``subagent_started`` (on the parent's session) comes
first and links ``child_session_id`` to the parent's ``tool_call_id``;
``subagent_completed`` comes last. Questions inside the child (``ask_user``,
Plan Mode, tool approval) therefore reach the parent's consumer, who answers
them as usual, with ``deliver`` / ``emit_external_event`` on the parent agent
and the child's session id: this extension hands such an event to the agent
that runs that session. ``pending()`` of the parent lists the child's waiting
calls too.

Children nest (a child may itself have subagents), at most ``max_depth`` deep
(default ``MAX_DEPTH``, 3): a top-level request runs at depth 0, its child at
1; a call that would start a child deeper than ``max_depth`` is a failed tool
result and starts nothing. Each call is a ``machines.subagent.SUBAGENT``
machine (``checking -> running | refused``, ``running -> completed | failed |
cancelled``) whose transitions are streamed on the parent's session.
"""

from __future__ import annotations

import collections
import contextvars
import hashlib
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

import attrs
import trio

from machines.build import BoundMachine
from machines.subagent import SUBAGENT
from orchestrator.agent import Agent, AgentClient
from orchestrator.checks import text as _text
from orchestrator.checks import whole
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Refusal, Verdict
from orchestrator.errors import ToolArgumentsError
from orchestrator.events import AgentEvent, SubagentCompletedEvent, SubagentStartedEvent, TransitionEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.limits import UsageLimits
from orchestrator.messages import ToolCall, UserMessage
from orchestrator.model import Usage
from orchestrator.observe.trace import NestedTrace
from orchestrator.runtime.context import AgentView
from orchestrator.runtime.pending import PendingCall
from orchestrator.runtime.run import CLEANUP_SECONDS
from orchestrator.tools import ToolDefinition, ToolResult, build_tool

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

MAX_DEPTH = 3
"""How deep subagents nest by default: a top-level request's child is at depth 1."""

SESSION_SEPARATOR = ":"
"""Joins a parent session id and a tool call id into the child's session id (safe in a URL path)."""

CHILD_SESSION_ID_LIMIT = 200
"""The longest child session id: the HTTP service's limit of a path id, so a child's question can be answered."""

DIGEST_MARK = "~"
"""Starts the digest that ends a shortened child session id (never the start of a tool call id kept as it is)."""

DIGEST_CHARS = 32
"""Hex digits of the digest (128 bits of SHA-256) that names the child in a shortened id."""

_PLAIN_CALL_ID = re.compile(r"[A-Za-z0-9_.-]+")

KEPT_SESSIONS = 1024
"""Parent sessions whose latest request's children are kept for ``trace`` (oldest dropped first)."""

_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("orchestrator_subagent_depth", default=0)

# (extension, session) pairs a delivery or a pending listing is passing through in this thread:
# an agent that is its own subagent must not hand an event to itself forever.
_visiting = threading.local()


def child_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The session of the child request run for ``tool_call_id`` of a request of ``parent_session_id``.

    ``"<parent>:<tool call id>"`` when that fits ``CHILD_SESSION_ID_LIMIT`` and the call id
    is plain (letters, digits, ``_.-``); otherwise the parent's id cut short, the separator,
    ``~`` and a digest of both ids: at most the limit, the same for the same pair, and
    never the id of another pair.
    """
    plain = f"{parent_session_id}{SESSION_SEPARATOR}{tool_call_id}"
    if len(plain) <= CHILD_SESSION_ID_LIMIT and _PLAIN_CALL_ID.fullmatch(tool_call_id):
        return plain
    both = f"{len(parent_session_id)}:{parent_session_id}{SESSION_SEPARATOR}{tool_call_id}"
    digest = hashlib.sha256(both.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
    keep = CHILD_SESSION_ID_LIMIT - len(SESSION_SEPARATOR) - len(DIGEST_MARK) - DIGEST_CHARS
    return f"{parent_session_id[:keep]}{SESSION_SEPARATOR}{DIGEST_MARK}{digest}"


def current_depth() -> int:
    """How deep the running task is: 0 in a top-level request, 1 inside its child, and so on."""
    return _DEPTH.get()


@attrs.frozen(eq=False)
class _Child:
    """One child request started for a tool call of a parent request."""

    tool: str
    tool_call_id: str
    session_id: str
    parent_session_id: str
    parent_agent: AgentView
    agent: Agent


class _ToParent:
    """The event sink of a child request: each event goes on the parent's stream, in the child's order.

    ``offer`` always declines, so the child hands every event over through ``put``
    behind its own fair lock, and a parent waiting for its consumer holds the child too.
    """

    def __init__(self, parent: AgentRunContext) -> None:
        self.parent = parent

    def offer(self, event: AgentEvent) -> bool:
        return False

    async def put(self, event: AgentEvent) -> None:
        await self.parent.forward(event)


@contextmanager
def _visit(key: tuple[int, str]) -> Iterator[bool]:
    """True unless this thread is already passing ``key`` (then the caller must not go on)."""
    seen: set[tuple[int, str]] = getattr(_visiting, "keys", None) or set()
    _visiting.keys = seen
    if key in seen:
        yield False
        return
    seen.add(key)
    try:
        yield True
    finally:
        seen.discard(key)


Outcome = Literal["completed", "failed", "cancelled"]


def _cancelled_only(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_cancelled_only(inner) for inner in error.exceptions)
    return isinstance(error, trio.Cancelled)


class SubAgentExtension(AgentExtension):
    """Offers ``agent`` as the tool ``name(task)``; see the module's documentation."""

    def __init__(self, agent: Agent | AgentClient, *, name: str, description: str, max_depth: int = MAX_DEPTH) -> None:
        if not isinstance(agent, (Agent, AgentClient)):
            raise TypeError(f"SubAgentExtension.agent must be an Agent or AgentClient, got {type(agent).__name__}")
        _text(blank=False).check("SubAgentExtension.name", name)
        _text().check("SubAgentExtension.description", description)
        whole(1).check("SubAgentExtension.max_depth", max_depth)
        self.agent: Agent = agent.agent if isinstance(agent, AgentClient) else agent
        self.tool_name = name
        self.max_depth = max_depth
        self.name = f"subagent:{name}"
        self.tool = self._build_tool(description)
        self._lock = threading.Lock()
        self._live: dict[str, _Child] = {}
        # Per parent session: the request id of its latest request with children, and those children.
        self._latest: collections.OrderedDict[str, tuple[str, list[_Child]]] = collections.OrderedDict()

    def _build_tool(self, description: str) -> ToolDefinition:
        delegate = self._delegate

        async def run_subagent(context: AgentRunContext, call: ToolCall, task: str) -> ToolResult:
            """Hand a task to the subagent and return its answer.

            Args:
                task: what the subagent should do, with everything it needs to know
            """
            return await delegate(context, call, task)

        return build_tool(run_subagent, name=self.tool_name, description=description)

    async def on_tool(self, context: AgentRunContext) -> None:
        """Offer the subagent's tool in every request."""
        context.register_tool(self.tool)

    # one call ---------------------------------------------------------------

    async def _delegate(self, context: AgentRunContext, call: ToolCall, task: str) -> ToolResult:
        if not task.strip():
            raise ToolArgumentsError("task: must not be blank")
        depth = current_depth() + 1
        machine = BoundMachine(SUBAGENT, {"within_depth": lambda event: depth <= self.max_depth})
        try:
            await self._step(context, machine, "start")
            if machine.state() == "refused":
                return ToolResult(
                    f"refused: {self.tool_name} would run at depth {depth}, and subagents nest at most "
                    f"{self.max_depth} deep",
                    "failed",
                )
            return await self._run_child(context, call, task, depth, machine)
        finally:
            machine.unbind()

    async def _run_child(
        self, context: AgentRunContext, call: ToolCall, task: str, depth: int, machine: BoundMachine
    ) -> ToolResult:
        child = _Child(
            self.tool_name,
            call.id,
            child_session_id(context.session_id, call.id),
            context.session_id,
            context.agent,
            self.agent,
        )
        sink = _ToParent(context) if context.streams else None
        # A parent that counts its usage counts its children's too (a child with no limits of its own only counts).
        counting = context.usage is not None
        limits = UsageLimits() if counting and self.agent.usage_limits is None else None
        try:
            run = await self.agent._open_run(
                AgentRunConfig(session_id=child.session_id, usage_limits=limits), UserMessage(task), sink
            )
        except Exception as error:
            await self._step(context, machine, "fail")
            return ToolResult(f"{self.tool_name} could not start: {type(error).__name__}: {error}", "failed")
        self._enter(child, context.request_id)
        token = _DEPTH.set(depth)
        try:
            await context.emit(
                SubagentStartedEvent(
                    tool_call_id=call.id,
                    agent=self.tool_name,
                    child_session_id=child.session_id,
                    child_request_id=run.context.request_id,
                    depth=depth,
                )
            )
            try:
                answer = await run.run()
            except Exception as error:
                why = f"{self.tool_name} failed: {type(error).__name__}: {error}"
                await self._finish(context, machine, child, run.context.request_id, "failed", why)
                return ToolResult(why, "failed")
            except BaseException as error:
                outcome: Outcome = "cancelled" if _cancelled_only(error) else "failed"
                with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                    await self._finish(context, machine, child, run.context.request_id, outcome, "")
                raise
            await self._finish(context, machine, child, run.context.request_id, "completed", answer.content)
            return ToolResult(answer.content)
        finally:
            _DEPTH.reset(token)
            if counting and run.budget is not None:
                spent = run.budget.report()
                context.record_subagent_usage(
                    Usage(
                        spent.input_tokens + spent.subagents.input_tokens,
                        spent.output_tokens + spent.subagents.output_tokens,
                    )
                )
            self.agent._close_run(run)
            self._leave(child)

    async def _finish(
        self,
        context: AgentRunContext,
        machine: BoundMachine,
        child: _Child,
        request_id: str,
        outcome: Outcome,
        result: str,
    ) -> None:
        await self._step(context, machine, {"completed": "complete", "failed": "fail", "cancelled": "cancel"}[outcome])
        await context.emit(
            SubagentCompletedEvent(
                tool_call_id=child.tool_call_id,
                agent=self.tool_name,
                child_session_id=child.session_id,
                child_request_id=request_id,
                outcome=outcome,
                result=result,
            )
        )

    async def _step(self, context: AgentRunContext, machine: BoundMachine, trigger: str) -> None:
        step, _ = machine.fire(trigger)
        await context.emit(
            TransitionEvent(
                machine=step.machine, region=step.region, source=step.source, trigger=step.trigger, dest=step.dest
            )
        )

    # children ---------------------------------------------------------------

    def _enter(self, child: _Child, parent_request_id: str) -> None:
        with self._lock:
            self._live[child.session_id] = child
            latest = self._latest.get(child.parent_session_id)
            if latest is None or latest[0] != parent_request_id:
                latest = (parent_request_id, [])
            latest[1].append(child)
            self._latest[child.parent_session_id] = latest
            self._latest.move_to_end(child.parent_session_id)
            while len(self._latest) > KEPT_SESSIONS:
                self._latest.popitem(last=False)

    def _leave(self, child: _Child) -> None:
        with self._lock:
            if self._live.get(child.session_id) is child:
                del self._live[child.session_id]

    def live_children(self) -> list[str]:
        """Session ids of the child requests running now."""
        with self._lock:
            return list(self._live)

    def _holder(self, session_id: str) -> _Child | None:
        """The running child (started here or by a subagent of a child) whose session is ``session_id``."""
        with self._lock:
            children = list(self._live.values())
        for child in children:
            if child.session_id == session_id:
                return child
        for child in children:
            for extension in child.agent.extensions:
                if extension is self or not isinstance(extension, SubAgentExtension):
                    continue
                with _visit((id(extension), session_id)) as first:
                    found = extension._holder(session_id) if first else None
                if found is not None:
                    return found
        return None

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Verdict:
        """Hand an event meant for a running child session to the agent that runs it.

        Not for this extension (False) when no child runs that session, or when the
        child runs on the agent being delivered to (its own extensions see the event).
        """
        child = self._holder(config.session_id)
        if child is None or child.agent is child.parent_agent:
            return False
        with _visit((id(self), config.session_id)) as first:
            if not first:
                return False
            delivery = child.agent.deliver(event, config=config)
        if delivery:
            return True
        return Refusal(f"subagent session {config.session_id!r}: {delivery.reason}")

    def delegated_calls(self, session_id: str | None = None) -> list[PendingCall]:
        """Waiting calls of running children: all of them (None), those of a parent session, or of one child."""
        with self._lock:
            children = list(self._live.values())
        calls: list[PendingCall] = []
        for child in children:
            with _visit((id(self), child.session_id)) as first:
                if not first:
                    continue
                found = child.agent.pending(child.session_id)
            if session_id is None or session_id in (child.parent_session_id, child.session_id):
                calls += found
            else:
                calls += [c for c in found if c.session_id == session_id]
        return calls

    def child_traces(self, session_id: str, request_id: str | None = None) -> list[NestedTrace]:
        """The paths of the children of the latest request of ``session_id`` that had any, in start order.

        With ``request_id``, only when that request is the one: none for an older request.
        """
        with self._lock:
            latest = self._latest.get(session_id)
            if latest is not None and request_id not in (None, latest[0]):
                latest = None
            children = list(latest[1]) if latest is not None else []
        traces: list[NestedTrace] = []
        for child in children:
            with _visit((id(self), child.session_id)) as first:
                nested = child.agent.child_traces(child.session_id) if first else []
            traces.append(
                NestedTrace(
                    label=f"{child.tool} {child.tool_call_id}",
                    session_id=child.session_id,
                    tool_call_id=child.tool_call_id,
                    steps=tuple(child.agent.transitions(child.session_id)),
                    children=tuple(nested),
                )
            )
        return traces


def agent_tool(
    agent: Agent | AgentClient, *, name: str, description: str, max_depth: int = MAX_DEPTH
) -> SubAgentExtension:
    """``agent`` as the tool ``name(task)`` of another agent: pass the result in its ``extensions``."""
    return SubAgentExtension(agent, name=name, description=description, max_depth=max_depth)

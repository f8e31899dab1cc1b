"""SteeringExtension: an agent-owned urgent user inbox, one per running request.

Text arrives through ``Agent.emit_external_event(ExternalEvent("steering_message",
{"content": ...}), config=AgentRunConfig(session_id=..., request_id=...))`` from
any thread; typed input (multimodal included) through
``await context.publish(SteeringMessageEvent(UserMessage(...)))``. The runtime
takes messages after each model and tool call; steering never cancels a running
call, it replaces the continuation of the current task.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from machines.build import BoundMachine
from machines.steering import STEERING_INBOX
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.events import AgentEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import UserMessage

if TYPE_CHECKING:
    from orchestrator.context import AgentRunContext

log = logging.getLogger("orchestrator.extensions.steering")

STEERING_EVENT = "steering_message"


@attrs.frozen
class SteeringMessageEvent(AgentEvent):
    """Typed steering input published inside a request."""

    kind: ClassVar[str] = "steering_message"
    message: UserMessage


class _Inbox:
    """One request's queue and its steering_inbox machine."""

    def __init__(self, session_id: str, request_id: str) -> None:
        self.session_id = session_id
        self.request_id = request_id
        self.messages: deque[UserMessage] = deque()
        self.machine = BoundMachine(STEERING_INBOX, {"has_more": lambda _: len(self.messages) > 0})

    @property
    def accepting(self) -> bool:
        return self.machine.may("hold")

    def put(self, message: UserMessage) -> None:
        self.messages.append(message)
        self.machine.fire("hold")

    def pop(self) -> UserMessage | None:
        if not self.messages:
            return None
        message = self.messages.popleft()
        self.machine.fire("take")
        return message


class SteeringExtension(AgentExtension):
    """Agent-owned urgent user inbox, checked after each model and tool call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inboxes: dict[str, _Inbox] = {}

    def open(self, context: AgentRunContext) -> None:
        """Initialize request-local routing before extension hooks run."""
        inbox = _Inbox(context.session_id, context.request_id)
        inbox.machine.fire("open")
        with self._lock:
            self._inboxes[context.request_id] = inbox

    def close(self, context: AgentRunContext) -> None:
        """Clear routing and messages on every request exit."""
        with self._lock:
            inbox = self._inboxes.pop(context.request_id, None)
            if inbox is None:
                return
            if inbox.messages:
                log.info(
                    "request %s ended with %d steering message(s) unanswered", inbox.request_id, len(inbox.messages)
                )
            inbox.messages.clear()
            if inbox.machine.may("close"):
                inbox.machine.fire("close")
        inbox.machine.unbind()

    def accept(self, config: AgentRunConfig, event: ExternalEvent) -> bool:
        """Route external text by session and optional request id, from any thread."""
        if event.name != STEERING_EVENT:
            return False
        content = event.payload.get("content") if isinstance(event.payload, Mapping) else None
        if not isinstance(content, str) or not content.strip():
            log.warning("refused steering for %s: content must be a non-empty string", config.session_id)
            return False
        with self._lock:
            inbox = self._route(config)
            if inbox is None:
                return False
            inbox.put(UserMessage(content))
        return True

    def _route(self, config: AgentRunConfig) -> _Inbox | None:
        if config.request_id is not None:
            inbox = self._inboxes.get(config.request_id)
            if inbox is None or inbox.session_id != config.session_id:
                return None
            return inbox if inbox.accepting else None
        for inbox in self._inboxes.values():
            if inbox.session_id == config.session_id and inbox.accepting:
                return inbox
        return None

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        """Receive typed user input, including multimodal UserMessages."""
        if not isinstance(event, SteeringMessageEvent):
            return
        with self._lock:
            inbox = self._inboxes.get(context.request_id)
            if inbox is None or not inbox.accepting:
                raise RuntimeError(f"request {context.request_id} no longer accepts steering")
            inbox.put(event.message)

    def take(self, context: AgentRunContext) -> UserMessage | None:
        """Poll after a model/tool call without closing an empty inbox."""
        with self._lock:
            inbox = self._inboxes.get(context.request_id)
            return inbox.pop() if inbox is not None else None

    def select_next(self, context: AgentRunContext, reserve_other_input: Callable[[], bool]) -> UserMessage | None:
        """Return only steering input; atomically close when no input remains.

        The lock is held while ``reserve_other_input`` runs, so a message is
        either returned here or refused by ``accept`` afterwards.
        """
        with self._lock:
            inbox = self._inboxes.get(context.request_id)
            if inbox is None:
                reserve_other_input()
                return None
            message = inbox.pop()
            if message is not None:
                return message
            if not reserve_other_input() and inbox.machine.may("close"):
                inbox.machine.fire("close")
            return None

    def routed(self) -> list[tuple[str, str, int]]:
        """(session_id, request_id, queued) of every open inbox."""
        with self._lock:
            return [(i.session_id, i.request_id, len(i.messages)) for i in self._inboxes.values()]

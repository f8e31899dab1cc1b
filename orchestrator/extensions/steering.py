"""SteeringExtension: an agent-owned urgent user inbox, one per running request.

Text arrives through ``Agent.emit_external_event(ExternalEvent("steering_message",
{"content": ...}), config=AgentRunConfig(session_id=..., request_id=...))`` from
any thread (``{"message": UserMessage(...)}`` carries typed input the same way);
typed input (multimodal included) also through
``await context.publish(SteeringMessageEvent(UserMessage(...)))``. The runtime
takes messages after each model and tool call; steering never cancels a running
call, it replaces the continuation of the current task.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from machines.build import BoundMachine
from machines.steering import STEERING_INBOX
from orchestrator import events
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Refusal, Verdict
from orchestrator.errors import AgentError
from orchestrator.events import AgentEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import ImagePart, UserMessage, clean_message

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext
    from orchestrator.runtime.inbox import InboxProbe

log = logging.getLogger("orchestrator.extensions.steering")

STEERING_EVENT = "steering_message"


class SteeringClosed(AgentError):
    """Typed steering was published to a request whose inbox no longer accepts input."""


class InvalidSteering(AgentError, ValueError):
    """Typed steering carried no content (no text and no image)."""


def _is_empty(message: UserMessage) -> bool:
    if isinstance(message.content, str):
        return not message.content.strip()
    return not message.text.strip() and not any(isinstance(part, ImagePart) for part in message.content)


def _cleaned(message: UserMessage) -> UserMessage:
    """The message with its text made encodable as UTF-8, as it is queued and announced."""
    cleaned = clean_message(message)
    assert isinstance(cleaned, UserMessage)
    return cleaned


def _external_message(payload: object) -> UserMessage | Refusal:
    """The steering message an external payload carries, or why it carries none."""
    if not isinstance(payload, Mapping):
        return Refusal(f"the payload must be an object, got {type(payload).__name__}")
    if "message" in payload:
        message = payload["message"]
        if not isinstance(message, UserMessage):
            return Refusal(f"'message' must be a UserMessage, got {type(message).__name__}")
        return Refusal("'message' has neither text nor an image") if _is_empty(message) else message
    content = payload.get("content")
    if not isinstance(content, str):
        return Refusal("give 'content' text or a UserMessage as 'message'")
    return UserMessage(content) if content.strip() else Refusal("'content' is blank")


@attrs.frozen(repr=False, eq=False)  # AgentEvent's repr, eq and hash read every field
class SteeringMessageEvent(AgentEvent):
    """Typed steering input published inside a request."""

    kind: ClassVar[str] = STEERING_EVENT
    message: UserMessage = attrs.field(validator=attrs.validators.instance_of(UserMessage))


def _has_messages(event: Any) -> bool:
    inbox: _Inbox = event.model.host
    return bool(inbox.messages)


#: The inbox machine's guards, shared by every inbox (each reaches its own as the model's host).
_INBOX_GUARDS: Mapping[str, Callable[[Any], bool]] = {"has_messages": _has_messages}


class _Inbox:
    """One request's queue and its steering_inbox machine.

    ``messages`` and ``unannounced`` are lists once something was queued, an
    empty tuple before: most requests are never steered, and thousands may wait
    at once.
    """

    __slots__ = ("machine", "messages", "owner", "request_id", "session_id", "unannounced")

    def __init__(self, context: AgentRunContext) -> None:
        self.owner = context
        self.session_id = context.session_id
        self.request_id = context.request_id
        # A list (a deque keeps a block of 64 slots even empty): steering messages are few.
        self.messages: list[UserMessage] | tuple[()] = ()
        # Messages taken from outside the request, not yet announced in it (steering_accepted).
        self.unannounced: list[UserMessage] | tuple[()] = ()
        self.machine = BoundMachine(STEERING_INBOX, _INBOX_GUARDS, host=self)

    @property
    def accepting(self) -> bool:
        return self.machine.may("hold")

    @property
    def quiet(self) -> bool:
        """Nothing to take and nothing to announce (InboxProbe)."""
        return not self.messages and not self.unannounced

    def put(self, message: UserMessage) -> None:
        self.machine.fire("hold")
        if isinstance(self.messages, list):
            self.messages.append(message)
        else:
            self.messages = [message]

    def announce_later(self, message: UserMessage) -> None:
        """Keep ``message`` (taken from outside) until the request announces it."""
        if isinstance(self.unannounced, list):
            self.unannounced.append(message)
        else:
            self.unannounced = [message]

    def pop(self) -> UserMessage | None:
        if not self.messages:
            return None
        assert isinstance(self.messages, list)
        message = self.messages.pop(0)
        self.machine.fire("take")
        return message


class SteeringExtension(AgentExtension):
    """Agent-owned urgent user inbox, checked after each model and tool call.

    Steering replaces the continuation of the current task. It does not cancel
    an in-flight model or tool. Unexecuted tool calls receive explicit skipped
    results before the new user message is appended. Internal messages remain
    queued until steering has been answered.

    Messages are answered one at a time, in the order they were accepted: each
    becomes its own UserMessage and its own steering turn. External input is
    routed to ``config.request_id`` when given, otherwise to the one running
    request of ``config.session_id``; it is refused when no request, or more than
    one (an instance shared by several Agents), could take it. Blank or
    non-string content is refused; typed input without text or image raises
    InvalidSteering. One Agent takes at most one SteeringExtension, so a message
    can never be queued (and answered) twice; every Agent has one unless it was
    created with ``steering=False``.

    Each message taken is announced by a ``steering_accepted`` event (typed input
    as it is published, external input when the request next looks at its
    inbox), and ``steering_applied`` follows once it replaced the turn.
    """

    event_names = frozenset({STEERING_EVENT})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inboxes: dict[tuple[str, str], _Inbox] = {}

    def _own(self, context: AgentRunContext) -> _Inbox | None:
        inbox = self._inboxes.get((context.session_id, context.request_id))
        return inbox if inbox is not None and inbox.owner is context else None

    def open(self, context: AgentRunContext) -> InboxProbe:
        """Initialize request-local routing before extension hooks run; the request's inbox is its probe."""
        inbox = _Inbox(context)
        inbox.machine.fire("open")
        key = (context.session_id, context.request_id)
        with self._lock:
            if key in self._inboxes:
                inbox.machine.unbind()
                raise ValueError(f"request {context.request_id!r} of session {context.session_id!r} is already open")
            self._inboxes[key] = inbox
        return inbox

    def close(self, context: AgentRunContext) -> None:
        """Clear routing and messages on every request exit."""
        with self._lock:
            inbox = self._own(context)
            if inbox is None:
                return
            del self._inboxes[(inbox.session_id, inbox.request_id)]
            dropped = len(inbox.messages)
            inbox.messages = ()
            if inbox.machine.may("close"):
                inbox.machine.fire("close")
        inbox.machine.unbind()
        if dropped:
            log.warning("request %s ended with %d accepted steering message(s) unanswered", inbox.request_id, dropped)

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Verdict:
        """Route external text by session and optional request ID, from any thread; or say why not."""
        if event.name != STEERING_EVENT:
            return False
        message = _external_message(event.payload)
        if isinstance(message, Refusal):
            return message
        message = _cleaned(message)
        with self._lock:
            inbox = self._route(config)
            if isinstance(inbox, Refusal):
                return inbox
            inbox.put(message)
            inbox.announce_later(message)
        return True

    def _route(self, config: AgentRunConfig) -> _Inbox | Refusal:
        session = config.session_id
        if config.request_id is not None:
            inbox = self._inboxes.get((session, config.request_id))
            if inbox is None:
                return Refusal(f"no running request {config.request_id!r} in session {session!r}")
            if not inbox.accepting:
                return Refusal(f"request {config.request_id!r} of session {session!r} no longer takes steering")
            return inbox
        mine = [i for i in self._inboxes.values() if i.session_id == session]
        matches = [i for i in mine if i.accepting]
        if len(matches) == 1:
            return matches[0]
        if matches:
            return Refusal(f"{len(matches)} running requests in session {session!r}; give request_id")
        if mine:
            return Refusal(f"the request of session {session!r} no longer takes steering")
        return Refusal(f"no running request in session {session!r}")

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        """Receive typed user input, including multimodal UserMessages.

        Raises SteeringClosed when the request no longer accepts steering (it is
        completing or was never opened), and InvalidSteering when the message has
        neither text nor an image, so the publisher knows it was not taken.
        """
        if not isinstance(event, SteeringMessageEvent):
            return
        if _is_empty(event.message):
            raise InvalidSteering("steering needs text or an image; the message is empty")
        with self._lock:
            inbox = self._own(context)
            if inbox is None or not inbox.accepting:
                raise SteeringClosed(f"request {context.request_id} no longer accepts steering")
            message = _cleaned(event.message)
            inbox.put(message)
        await context.emit(events.SteeringAcceptedEvent(message=message, source="extension"))

    def drain_accepted(self, context: AgentRunContext) -> list[UserMessage]:
        """Messages taken from outside since the last call; the runtime announces each (steering_accepted).

        Asked after every model and tool call, and almost always empty: that is
        seen without the lock (one read of the list, which another thread only
        appends to under the lock; a message appended just after the read is
        found by the next call).
        """
        inbox = self._own(context)
        if inbox is None or not inbox.unannounced:
            return []
        with self._lock:
            inbox = self._own(context)
            if inbox is None:
                return []
            taken, inbox.unannounced = inbox.unannounced, ()
            return taken if isinstance(taken, list) else []

    def take(self, context: AgentRunContext) -> UserMessage | None:
        """Poll after a model/tool call without closing an empty inbox (an empty one is seen without the lock)."""
        inbox = self._own(context)
        if inbox is None or not inbox.messages:
            return None
        with self._lock:
            inbox = self._own(context)
            return inbox.pop() if inbox is not None else None

    def select_next(self, context: AgentRunContext, reserve_other_input: Callable[[], bool]) -> UserMessage | None:
        """Return only steering input; atomically close when no input remains.

        The steering lock is held while the synchronous ``reserve_other_input``
        runs, so a racing message is either returned here or refused by
        ``accept``. The inbox stays open when the callback reserved other input.
        """
        with self._lock:
            inbox = self._own(context)
            message = inbox.pop() if inbox is not None else None
            if message is not None:
                return message
            if not reserve_other_input() and inbox is not None and inbox.machine.may("complete"):
                inbox.machine.fire("complete")
            return None

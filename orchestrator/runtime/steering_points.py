"""Where a request looks for steering and internal input: the part of RequestRun that asks its inboxes.

``SteeringPoints`` is a base of ``RequestRun`` (``orchestrator.runtime.run``), on top of ``EventEmission``.
After each model and tool call the request asks its inboxes (the agent's
``SteeringExtension`` and any other ``InputInbox``) for a message; messages
taken from outside since it last asked are announced (``steering_accepted``)
first. Before the request concludes, ``_select_next`` takes either steering or
an internal message queued by an extension (never both: steering first), and an
inbox closes atomically when nothing is left.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator import events as ev
from orchestrator.errors import AgentError
from orchestrator.messages import SystemMessage, UserMessage
from orchestrator.runtime.emission import EventEmission

if TYPE_CHECKING:
    from orchestrator.runtime.inbox import InboxProbe, InputInbox
    from orchestrator.runtime.ports import AgentPort

log = logging.getLogger("orchestrator.runtime")


class SteeringPoints(EventEmission):
    """Asking the agent's inboxes for steering and internal input (a base of RequestRun)."""

    # Set by RequestRun.__init__: the steering message taken and not yet applied, the internal
    # message reserved, those queued (a list made on the first), whether the request refuses
    # more (it is concluding), and whether the inboxes were closed.
    # And the probe of the agent's one inbox, when it gave one (None otherwise: every poll asks).
    __slots__ = ("_probe", "inboxes_closed", "internal", "internal_queue", "internal_refused", "steering")

    _probe: InboxProbe | None

    steering: UserMessage | None
    internal: UserMessage | SystemMessage | None
    internal_queue: list[UserMessage | SystemMessage] | None
    internal_refused: bool
    inboxes_closed: bool
    # RequestRun's.
    agent: AgentPort

    @property
    def inboxes(self) -> Sequence[InputInbox]:
        return self.agent.inboxes

    def _open_inboxes(self) -> None:
        probe = None
        for inbox in self.inboxes:
            probe = inbox.open(self.context)
        self._probe = probe if len(self.inboxes) == 1 else None

    def _quiet(self) -> bool:
        """Whether the agent's one inbox has nothing to take or announce, seen without asking it."""
        probe = self._probe
        return probe is not None and probe.quiet

    async def _poll(self) -> None:
        """After a model or tool call: announce what an inbox took from outside, then take steering."""
        if self._quiet():
            return
        await self._announce_steering()
        self._poll_steering()

    async def _announce_steering(self) -> None:
        """Stream steering_accepted for each message an inbox took from outside since it was last asked."""
        for inbox in self.inboxes:
            drain = getattr(inbox, "drain_accepted", None)
            if drain is None:
                continue
            for message in drain(self.context):
                await self._emit_new(ev.SteeringAcceptedEvent, message=message, source="external")

    def _poll_steering(self) -> None:
        if self.steering is not None:
            return
        for inbox in self.inboxes:
            message = inbox.take(self.context)
            if message is not None:
                self.steering = message
                return

    def _reserve_internal(self) -> bool:
        if self.internal is None and self.internal_queue:
            self.internal = self.internal_queue.pop(0)
        return self.internal is not None

    def _select_next(self) -> None:
        for inbox in self.inboxes:
            message = inbox.select_next(self.context, self._reserve_internal)
            if message is not None:
                self.steering = message
                return
        self._reserve_internal()

    def queue_internal(self, message: UserMessage | SystemMessage) -> None:
        if self.internal_refused:
            raise AgentError("the request is concluding: it can no longer answer an internal message")
        if self.internal_queue is None:
            self.internal_queue = []
        self.internal_queue.append(message)

    def _close_inboxes(self) -> None:
        if self.inboxes_closed:
            return
        self.inboxes_closed = True
        for inbox in self.inboxes:
            try:
                inbox.close(self.context)
            except Exception:
                log.exception("inbox close failed")

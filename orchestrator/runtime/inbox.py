"""The protocol of an input inbox such as SteeringExtension.

The runtime opens every registered inbox when a request starts, polls it with
``take`` after each model and tool call, asks ``select_next`` before it
concludes, and closes it on every exit.

``open`` may return an ``InboxProbe`` for the request: while its ``quiet`` is
true, the runtime of an agent with that one inbox skips the poll (no ``take``,
no ``drain_accepted``), which is what almost every poll of a request nobody
steers would find.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from orchestrator.messages import UserMessage

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext


class InboxProbe(Protocol):
    """What an inbox lets the request see of itself without asking it."""

    @property
    def quiet(self) -> bool:
        """True when the inbox holds nothing to take or announce (read without a lock: a message
        queued by another thread meanwhile is found by the next poll)."""
        ...


@runtime_checkable
class InputInbox(Protocol):
    def open(self, context: AgentRunContext) -> InboxProbe | None: ...

    def close(self, context: AgentRunContext) -> None: ...

    def take(self, context: AgentRunContext) -> UserMessage | None: ...

    def select_next(self, context: AgentRunContext, reserve_other_input: Callable[[], bool]) -> UserMessage | None: ...

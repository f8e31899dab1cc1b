"""The protocol of an input inbox such as SteeringExtension.

The runtime opens every registered inbox when a request starts, polls it with
``take`` after each model and tool call, asks ``select_next`` before it
concludes, and closes it on every exit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from orchestrator.messages import UserMessage

if TYPE_CHECKING:
    from orchestrator.context import AgentRunContext


@runtime_checkable
class InputInbox(Protocol):
    def open(self, context: AgentRunContext) -> None: ...

    def close(self, context: AgentRunContext) -> None: ...

    def take(self, context: AgentRunContext) -> UserMessage | None: ...

    def select_next(self, context: AgentRunContext, reserve_other_input: Callable[[], bool]) -> UserMessage | None: ...

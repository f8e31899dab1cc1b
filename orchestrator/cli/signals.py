"""Ctrl-C: cancel the running turn; at the prompt, a second press exits."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import trio

from orchestrator.cli.conversation import Conversation

CANCELLING = "(Ctrl-C: cancelling the turn)"


async def watch_interrupts(
    conversation: Conversation,
    at_prompt: Callable[[], None] | None = None,
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Each Ctrl-C cancels the running turn, or (no turn running) calls ``at_prompt``."""
    with trio.open_signal_receiver(signal.SIGINT) as presses:
        task_status.started()
        async for _ in presses:
            if conversation.running:
                await conversation.cancel(CANCELLING)
            elif at_prompt is not None:
                at_prompt()

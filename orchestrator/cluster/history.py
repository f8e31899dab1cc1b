"""``StoreHistory``: a worker's agent history. Runs read their session from the store; what they append
is written by their fenced commits (the DurableExtension), never around the lease; so is a compaction's
replacement of the history."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.messages import Message


class StoreHistory:
    """``load`` answers with what the worker read for the run it is opening (off the trio thread)."""

    def __init__(self) -> None:
        self._read: dict[str, list[Message]] = {}

    def preload(self, session_id: str, messages: Sequence[Message]) -> None:
        self._read[session_id] = list(messages)

    def load(self, session_id: str) -> list[Message]:
        return self._read.pop(session_id, [])

    def append(self, session_id: str, message: Message) -> None:
        """Nothing here: the run's commit writes it, fenced by the lease."""

    def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        """Nothing here: the run's next commit replaces the stored history (``history_replaced``), fenced."""

"""Session titles (kept in ``orchestrator.store.titles``, which the service reads too)."""

from __future__ import annotations

from orchestrator.store.titles import TITLE_LENGTH, set_title, set_titles, title_of

__all__ = ["TITLE_LENGTH", "set_title", "set_titles", "title_of"]

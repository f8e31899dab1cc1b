"""``--json``: each event as one line of JSON in the library's wire format (``orchestrator.wire``)."""

from __future__ import annotations

from orchestrator.wire.format import dumps

__all__ = ["dumps"]

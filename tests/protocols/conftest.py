"""The protocol tests serve the app on each host, as the server tests do."""

from __future__ import annotations

from tests.server.conftest import serving

__all__ = ["serving"]

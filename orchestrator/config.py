"""Per-request configuration and events delivered from outside a request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs


@attrs.frozen
class AgentRunConfig:
    """Which session a request or an external event belongs to."""

    session_id: str = "default"
    request_id: str | None = None


@attrs.frozen
class ExternalEvent:
    """An event from the application (a UI answer, a steering message)."""

    name: str
    payload: Mapping[str, Any] = attrs.field(factory=dict)

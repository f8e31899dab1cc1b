"""``--app MODULE:ATTR``: the application's own agent, for ``serve`` (and workers).

ATTR names an Agent or AgentClient, or a callable returning one (or an
awaitable of one, as ``create_agent`` does).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

from orchestrator.agent import Agent, AgentClient


class AppSpecError(ValueError):
    """``--app`` does not name an agent; the message says why."""


async def load_agent(spec: str) -> AgentClient:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise AppSpecError(f"--app must be MODULE:ATTR, got {spec!r}")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise AppSpecError(f"cannot import {module_name!r}: {error}") from None
    value: object = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AppSpecError(f"{module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(value, (Agent, AgentClient)) and callable(value):
        value = value()
        if inspect.isawaitable(value):
            value = await value
    if isinstance(value, AgentClient):
        return value
    if isinstance(value, Agent):
        return AgentClient(value)
    raise AppSpecError(f"{spec} is a {type(value).__name__}, not an Agent, an AgentClient or a callable returning one")

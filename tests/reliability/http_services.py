"""The ways the HTTP routes are served, for tests that send them all the same requests.

``in-process``: an agent in this process behind ``create_app`` on hypercorn (a scripted model that
answers at once); ``in-process under uvicorn``: the same in an AgentHost, on uvicorn. ``web node``:
``python -m orchestrator serve --db postgresql://...`` as a process of its own on a fresh database of
the throwaway PostgreSQL server, with no worker: its runs stay queued until they are cancelled, which
ends them at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from tests.cluster.processes import Cluster
from tests.server.support import serving, serving_uvicorn

KINDS = ("in-process", "in-process under uvicorn", "web node on PostgreSQL")


@asynccontextmanager
async def service(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The base URL of a running service of ``kind`` (one of ``KINDS``)."""
    if kind.startswith("in-process"):
        client = await create_agent(ScriptedModel([AssistantMessage("hello")], repeat_last=True))
        async with (serving if kind == "in-process" else serving_uvicorn)(client) as base:
            yield base
        return
    dsn: str = request.getfixturevalue("postgres_dsn")  # skips, saying why, without PostgreSQL
    with Cluster(dsn, tmp_path, tmp_path / "marks") as cluster:
        node = cluster.web("web")
        try:
            yield node.url
        except BaseException:
            print(node.output())
            raise

"""The agent ``serve`` runs without ``--app``: the CLI's model choice, SQLite sessions, Plan Mode, ask_user."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from orchestrator.agent import AgentClient, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.files.filesystem import FilesystemExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.model import Model

SYSTEM_PROMPT = "You are a helpful assistant. Be concise."


def build_default_model(spec: str | None, err: Callable[[str], None]) -> Model:
    """The model ``--model`` names (the scripted Plan Mode scenario by default, said on ``err``).

    An explicit provider that cannot be used exits with 2 (SystemExit), as in the CLI.
    """
    from orchestrator.providers.choice import choose

    model, _ = choose(spec or "scripted", True, err)
    return model


def _warn(text: str) -> None:
    sys.stderr.write(text)


async def default_client(model_spec: str | None, db: str | None, root: str) -> AgentClient:
    from orchestrator.providers.choice import default_db

    model = build_default_model(model_spec, _warn)
    path = Path(db or default_db())
    return await create_agent(
        model,
        history=None,
        system_prompt=SYSTEM_PROMPT,
        extensions=[
            SQLiteSessionStore(path),
            FilesystemExtension(root=root),
            PlanModeExtension(root=root),
            AskUserExtension(),
        ],
    )

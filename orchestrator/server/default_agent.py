"""The agent ``serve`` runs without ``--app``: the CLI's model choice, SQLite sessions, Plan Mode, ask_user."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from orchestrator.agent import AgentClient, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.filesystem import FilesystemExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore

SYSTEM_PROMPT = "You are a helpful assistant. Be concise."


def default_db() -> Path:
    """``$XDG_DATA_HOME/orchestrator/sessions.db`` (``~/.local/share`` without XDG_DATA_HOME)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "orchestrator" / "sessions.db"


async def default_client(model_spec: str | None, db: str | None, root: str) -> AgentClient:
    from orchestrator.cli import build_model

    def warn(text: str) -> None:
        sys.stderr.write(text)

    model, _ = build_model(model_spec or "scripted", True, warn)
    path = Path(db) if db else default_db()
    path.parent.mkdir(parents=True, exist_ok=True)
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

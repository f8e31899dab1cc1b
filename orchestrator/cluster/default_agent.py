"""The agent a worker runs without ``--app``: the CLI's model choice, the filesystem tools, Plan Mode, ask_user."""

from __future__ import annotations

from orchestrator.agent import AgentClient, create_agent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.files.filesystem import FilesystemExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.server.default_agent import SYSTEM_PROMPT


async def default_worker_client(model_spec: str | None, root: str) -> AgentClient:
    from orchestrator.server.default_agent import _warn, build_default_model

    model = build_default_model(model_spec, _warn)
    return await create_agent(
        model,
        history=None,
        system_prompt=SYSTEM_PROMPT,
        extensions=[FilesystemExtension(root=root), PlanModeExtension(root=root), AskUserExtension()],
    )

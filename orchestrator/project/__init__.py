"""Project configuration and the default agent built from it.

``load_config(Flags(...), project_dir)`` reads a project's ``.orchestrator.toml``,
``.mcp.json``, AGENTS.md files and skills folders and the user's settings, flags
first, then the project, then the user, each value with its source (``ConfigError``
names the file, line, key and reason of what cannot be used);
``open_default_agent(config, model, ...)`` builds the agent ``run``, ``chat``,
``serve`` and ``worker`` run without ``--app``.
"""

from orchestrator.project.agent import DefaultAgent, open_default_agent
from orchestrator.project.config import Flags, ProjectConfig, load_config
from orchestrator.project.settings import ConfigError

__all__ = ["ConfigError", "DefaultAgent", "Flags", "ProjectConfig", "load_config", "open_default_agent"]

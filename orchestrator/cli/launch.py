"""Choosing the model and opening the app, shared by ``run`` and ``chat``."""

from __future__ import annotations

import sys

from orchestrator.cli.app import App, flags_of
from orchestrator.cli.args import Options
from orchestrator.cli.render import Write
from orchestrator.model import Model
from orchestrator.project.agent import subagent_models
from orchestrator.project.config import ProjectConfig, load_config
from orchestrator.project.settings import ConfigError
from orchestrator.providers.choice import SCRIPTED_NOTICE, ModelUnavailable, build_model


def write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def configure(options: Options, err: Write) -> ProjectConfig | None:
    """The configuration in force for ``options``; None (its file, line and reason reported on ``err``) when a
    configuration file is unusable."""
    try:
        config = load_config(flags_of(options), options.project)
        subagent_models(config)  # a subagent's model that cannot be used is refused before anything starts
        return config
    except ConfigError as problem:
        err(f"error: {problem}\n")
        return None


def choose_model(
    options: Options, model: Model | None, err: Write, config: ProjectConfig | None = None
) -> tuple[Model, bool] | None:
    """The model and whether it is the scripted one; None (reported on ``err``) when unusable."""
    if model is not None:
        return model, False
    spec = options.model if config is None else config.model.value
    if spec == "scripted":
        spec = None
    try:
        chosen = build_model(spec, options.plan_mode)
    except ModelUnavailable as problem:
        err(f"error: {problem}\n")
        return None
    if spec is None and (config is None or config.model.source == "default"):
        err(SCRIPTED_NOTICE + "\n")
    return chosen, spec is None


def introduce(app: App, options: Options) -> None:
    for entry in app.built.config.mcp:
        if entry.reason is not None:
            app.screen.say(f"MCP server {entry.server.name} not started: {entry.reason}", style="yellow")
    session_id = app.session_id
    if options.session is None and not options.continue_last:
        app.screen.say(f"session {session_id} (continue it with -c or --session {session_id})", style="dim")
        return
    stored = app.store.messages(session_id)
    if not stored:
        app.screen.say(f"no stored session {session_id}; starting it", style="dim")
        return
    app.screen.say(f"resuming session {session_id} ({len(stored)} stored messages)", style="dim")

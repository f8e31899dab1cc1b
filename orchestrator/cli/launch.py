"""Choosing the model and opening the app, shared by ``run`` and ``chat``."""

from __future__ import annotations

import sys

from orchestrator.cli.app import App
from orchestrator.cli.args import Options
from orchestrator.cli.render import Write
from orchestrator.model import Model
from orchestrator.providers.choice import SCRIPTED_NOTICE, ModelUnavailable, build_model


def write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def choose_model(options: Options, model: Model | None, err: Write) -> tuple[Model, bool] | None:
    """The model and whether it is the scripted one; None (reported on ``err``) when unusable."""
    if model is not None:
        return model, False
    try:
        chosen = build_model(options.model, options.plan_mode)
    except ModelUnavailable as problem:
        err(f"error: {problem}\n")
        return None
    if options.model is None:
        err(SCRIPTED_NOTICE + "\n")
    return chosen, options.model is None


def introduce(app: App, options: Options) -> None:
    session_id = app.session_id
    if options.session is None and not options.continue_last:
        app.screen.say(f"session {session_id} (continue it with -c or --session {session_id})", style="dim")
        return
    stored = app.store.messages(session_id)
    if not stored:
        app.screen.say(f"no stored session {session_id}; starting it", style="dim")
        return
    app.screen.say(f"resuming session {session_id} ({len(stored)} stored messages)", style="dim")

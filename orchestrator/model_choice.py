"""The model a command line names (``run``, ``chat``, ``serve``, ``worker``); no silent fallback to the scripted one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from orchestrator.model import Model
from orchestrator.scenarios import scripted_model

SCRIPTED_NOTICE = "no --model given: running on the scripted model (try --model openai:NAME or anthropic:NAME)"


class ModelUnavailable(Exception):
    """An explicitly chosen model cannot be used (a missing key or package); the CLI exits with 2."""


def build_model(spec: str | None, plan_mode: bool) -> Model:
    """The model ``spec`` names, or the scripted model when ``spec`` is None."""
    if spec is None:
        return scripted_model(plan_mode)
    provider, _, name = spec.partition(":")
    if provider == "openai":
        if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
            raise ModelUnavailable(f"--model {spec}: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)")
    elif provider == "anthropic":
        if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_BASE_URL")):
            raise ModelUnavailable(f"--model {spec}: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL)")
    else:
        raise ModelUnavailable(f"--model {spec}: unknown provider {provider!r} (use openai:NAME or anthropic:NAME)")
    try:
        if provider == "openai":
            from orchestrator.providers.openai import OpenAIChatModel

            return OpenAIChatModel(name or None)
        from orchestrator.providers.anthropic import AnthropicModel

        return AnthropicModel(name or None)
    except ImportError as missing:
        raise ModelUnavailable(f"--model {spec}: {missing} (pip install 'orchestrator[providers]')") from None
    except ValueError as unusable:
        raise ModelUnavailable(f"--model {spec}: {unusable}") from None


def choose(spec: str, plan_mode: bool, err: Callable[[str], None]) -> tuple[Model, bool]:
    """``spec`` (``scripted`` or a provider) and whether it is the scripted model, for other front ends.

    An explicit provider that cannot be used is reported on ``err`` and exits with 2
    (SystemExit): there is no silent fallback to the scripted model.
    """
    if spec == "scripted":
        err(SCRIPTED_NOTICE.replace("no --model given", "model: scripted") + "\n")
        return build_model(None, plan_mode), True
    try:
        return build_model(spec, plan_mode), False
    except ModelUnavailable as problem:
        err(f"error: {problem}\n")
        raise SystemExit(2) from None


def default_db() -> str:
    """``$XDG_DATA_HOME/orchestrator/sessions.db`` (``~/.local/share`` when unset): outside any --root."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return os.path.join(base, "orchestrator", "sessions.db")

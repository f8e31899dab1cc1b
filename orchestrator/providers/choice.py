"""The model a command line names (``run``, ``chat``, ``serve``, ``worker``); no silent fallback to the scripted one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from orchestrator.model import Model
from orchestrator.providers.scripted import scripted_model

SCRIPTED_NOTICE = "no --model given: running on the scripted model (try --model openai:NAME or anthropic:NAME)"


class ModelUnavailable(Exception):
    """An explicitly chosen model cannot be used (a missing key or package); the CLI exits with 2."""


#: For each provider a command line may name: the environment that makes it usable, and what to set.
_PROVIDERS: dict[str, tuple[tuple[str, ...], str]] = {
    "openai": (("OPENAI_API_KEY", "OPENAI_BASE_URL"), "set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)"),
    "openai-responses": (("OPENAI_API_KEY", "OPENAI_BASE_URL"), "set OPENAI_API_KEY (or OPENAI_BASE_URL)"),
    "anthropic": (("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"), "set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL)"),
    "gemini": (
        ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"),
        "set GEMINI_API_KEY or GOOGLE_API_KEY (or GEMINI_BASE_URL)",
    ),
}
#: The ``--model`` forms, for help texts and errors.
MODEL_SPECS = "openai:NAME, openai-responses:NAME, anthropic:NAME or gemini:NAME"


def names_a_provider(spec: str) -> bool:
    """Whether ``spec`` has the form ``PROVIDER:NAME`` for a provider a command line may name."""
    provider, colon, _ = spec.partition(":")
    return bool(colon) and provider in _PROVIDERS


def _budget(provider: str, effort: str) -> int:
    if not effort.isdigit() or int(effort) < 1:
        raise ValueError(f"{provider} takes a thinking budget in tokens (a whole number) as its effort, got {effort!r}")
    return int(effort)


def _adapter(provider: str, name: str | None, effort: str | None = None) -> Model:
    if provider == "openai":
        from orchestrator.providers.openai import OpenAIChatModel

        return OpenAIChatModel(name, reasoning_effort=effort)
    if provider == "openai-responses":
        from orchestrator.providers.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel(name, reasoning_effort=effort)
    if provider == "gemini":
        from orchestrator.providers.gemini import GeminiModel

        return GeminiModel(name, thinking_budget=None if effort is None else _budget(provider, effort))
    from orchestrator.providers.anthropic import AnthropicModel

    return AnthropicModel(name, thinking_budget=None if effort is None else _budget(provider, effort))


def build_model(spec: str | None, plan_mode: bool, *, effort: str | None = None) -> Model:
    """The model ``spec`` names, or the scripted model when ``spec`` is None; ``effort`` is the reasoning effort
    (``low``, ``medium``, ``high`` ... for OpenAI, a thinking budget in tokens for Anthropic and Gemini)."""
    if spec is None:
        return scripted_model(plan_mode)
    provider, _, name = spec.partition(":")
    if provider not in _PROVIDERS:
        raise ModelUnavailable(f"--model {spec}: unknown provider {provider!r} (use {MODEL_SPECS})")
    variables, advice = _PROVIDERS[provider]
    if not any(os.environ.get(variable) for variable in variables):
        raise ModelUnavailable(f"--model {spec}: {advice}")
    try:
        return _adapter(provider, name or None, effort)
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

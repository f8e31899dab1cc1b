"""The terminal interface: ``python -m orchestrator run "PROMPT" | chat | sessions``.

Modules: ``args`` (command lines), ``models`` and ``scripted`` (which model),
``app`` (the agent and terminal a command line describes), ``lines`` (typed
lines and who gets them), ``render`` (what the screen shows),
``conversation`` (turns, events, questions), ``oneshot`` (``run``), ``chat``
and ``commands`` (the prompt loop and its slash commands), ``sessions`` (the
stored sessions), ``signals`` (Ctrl-C), ``main`` (entry points).
Only ``main`` is imported here, so ``python -m orchestrator demo`` never
imports rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.cli.main import command, main

if TYPE_CHECKING:
    from orchestrator.cli.args import Options
    from orchestrator.cli.oneshot import run
    from orchestrator.providers.choice import choose as build_model
    from orchestrator.providers.scripted import word_count

__all__ = ["Options", "build_model", "command", "main", "run", "word_count"]


def __getattr__(name: str) -> Any:
    if name == "Options":
        from orchestrator.cli.args import Options

        return Options
    if name == "run":
        from orchestrator.cli.oneshot import run

        return run
    if name == "build_model":
        from orchestrator.providers.choice import choose

        return choose
    if name == "word_count":
        from orchestrator.providers.scripted import word_count

        return word_count
    raise AttributeError(name)

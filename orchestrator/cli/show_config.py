"""``python -m orchestrator config``: the configuration in force, each value with where it came from."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from orchestrator.cli.parsing import OneLineParser, tool_pattern
from orchestrator.project.config import Flags, ProjectConfig, load_config, user_settings_path
from orchestrator.project.settings import ConfigError
from orchestrator.providers.choice import MODEL_SPECS, names_a_provider


def _parse(argv: Sequence[str]) -> tuple[Flags, str, bool]:
    parser = OneLineParser(
        prog="python -m orchestrator config",
        description="The configuration run and chat would use here: flags, then the project's files, then the user's.",
    )
    parser.add_argument("--project", metavar="DIR", default=".", help="the project folder (default: .)")
    parser.add_argument("--model", help=MODEL_SPECS)
    parser.add_argument("--yes", action="store_true", help="as run --yes")
    parser.add_argument(
        "--allow", action="append", type=tool_pattern, default=[], metavar="TOOL", help="as run --allow"
    )
    parser.add_argument(
        "--deny", action="append", type=tool_pattern, default=[], metavar="TOOL", help="as run --deny"
    )
    parser.add_argument("--trust-project", action="store_true", help="as run --trust-project")
    parser.add_argument("--json", action="store_true", help="print it as one JSON object")
    args = parser.parse_args(list(argv))
    if args.model is not None and not names_a_provider(args.model):
        parser.error(f"unknown --model {args.model!r}: use {MODEL_SPECS} (or leave it out)")
    if not os.path.isdir(args.project):
        parser.error(f"--project {args.project!r} is not a directory")
    flags = Flags(args.model, tuple(args.allow), tuple(args.deny), args.yes, args.trust_project)
    return flags, args.project, args.json


def rows(config: ProjectConfig) -> list[tuple[str, str, str]]:
    """(key, value, source) for every value in force."""
    found: list[tuple[str, str, str]] = [
        ("model", config.model.value or "scripted", config.model.source),
    ]
    for pattern, sourced in config.permissions.items():
        found.append((f"permissions.{pattern}", sourced.value, sourced.source))
    found.append(("plan_mode.writable", ", ".join(config.plan_writable.value), config.plan_writable.source))
    found.append(
        ("compaction.threshold_tokens", str(config.compaction_threshold.value), config.compaction_threshold.source)
    )
    found.append(("compaction.keep_last", str(config.compaction_keep_last.value), config.compaction_keep_last.source))
    for subagent, source in config.subagents:
        found.append((f"subagents.{subagent.name}", subagent.description, source))
        if subagent.model is not None:
            found.append((f"subagents.{subagent.name}.model", subagent.model, source))
        if subagent.tools is not None:
            found.append((f"subagents.{subagent.name}.tools", ", ".join(subagent.tools) or "(none)", source))
    found.append(("trusted", "yes" if config.trusted.value else "no", config.trusted.source))
    for path in config.agents_md:
        found.append(("agents_md", str(path), "found"))
    for path in config.skills:
        found.append(("skills", str(path), "found"))
    for entry in config.mcp:
        state = "starts with the first request" if entry.reason is None else f"not started: {entry.reason}"
        found.append((f"mcp.{entry.server.name}", f"{entry.server.describe()} ({state})", entry.source))
        for expansion in entry.expansions:
            # the variable's name, not its value: env and headers often hold secrets
            origin = "environment" if expansion.source == "environment" else f"default in {entry.source}"
            found.append((f"mcp.{entry.server.name}.{expansion.field}", expansion.reference, origin))
    return found


def as_json(config: ProjectConfig) -> dict[str, Any]:
    return {
        "fingerprint": config.fingerprint(),
        "project": None if config.project is None else str(config.project),
        "files": [str(path) for path in config.files],
        "user_settings": str(user_settings_path()),
        "values": [{"key": key, "value": value, "source": source} for key, value, source in rows(config)],
    }


def main(argv: Sequence[str]) -> int:
    try:
        flags, project, want_json = _parse(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        config = load_config(flags, project)
    except ConfigError as error:
        print(f"config: {error}", file=sys.stderr)
        return 2
    if want_json:
        print(json.dumps(as_json(config), indent=2))
        return 0
    print(f"configuration {config.fingerprint()}")
    print(f"project {config.project}")
    print(f"user settings {user_settings_path()}" + ("" if user_settings_path().is_file() else " (none)"))
    for path in config.files:
        print(f"read {path}")
    table = rows(config)
    width = max(len(key) for key, _, _ in table)
    for key, value, source in table:
        print(f"  {key:<{width}}  {value}  [{source}]")
    return 0

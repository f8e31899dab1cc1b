"""The settings files: ``.orchestrator.toml`` of a project and ``settings.toml`` of the user, checked strictly.

Both have the same keys; the user's file may also list ``trusted_projects``.
A key that is unknown, a value of the wrong type or out of range raises
``ConfigError`` naming the file, the line when it can be found, the key and the reason.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from orchestrator.extensions.tool_approval import Verdict
from orchestrator.providers.choice import MODEL_SPECS, names_a_provider

PROJECT_FILE = ".orchestrator.toml"
USER_FILE = "settings.toml"
VERDICTS: tuple[Verdict, ...] = ("allow", "ask", "deny")


class ConfigError(Exception):
    """A configuration file that cannot be used: ``path``, ``line`` (None when unknown), ``key`` and ``reason``."""

    def __init__(self, path: Path, key: str | None, reason: str, line: int | None = None) -> None:
        self.path = path
        self.key = key
        self.reason = reason
        self.line = line
        where = f"{path}:{line}" if line is not None else str(path)
        about = f" {key}:" if key else ""
        super().__init__(f"{where}:{about} {reason}")


#: The tools a subagent's ``tools`` may name: the workspace's file tools.
SUBAGENT_TOOLS = ("read_file", "write_file", "edit_file", "list_files", "glob", "grep")


@attrs.frozen
class Subagent:
    """A helper agent the model may hand a task to, as the tool ``name(task)``; ``model`` (a model spec) and
    ``tools`` (names of ``SUBAGENT_TOOLS``) are None when the settings leave them out."""

    name: str
    description: str
    system_prompt: str
    model: str | None = None
    tools: tuple[str, ...] | None = None


@attrs.frozen
class Settings:
    """What one settings file says; None (or empty) for what it leaves out."""

    path: Path
    model: str | None = None
    permissions: Mapping[str, Verdict] = attrs.field(factory=dict)  # tool name or pattern -> its verdict
    plan_writable: tuple[str, ...] | None = None
    compaction_threshold: int | None = None
    compaction_keep_last: int | None = None
    subagents: tuple[Subagent, ...] = ()
    trusted_projects: tuple[str, ...] = ()


_TOP = {"model", "permissions", "plan_mode", "compaction", "subagents"}
_USER_ONLY = {"trusted_projects"}
_TABLES: dict[str, set[str]] = {
    "permissions": set(VERDICTS),
    "plan_mode": {"writable"},
    "compaction": {"threshold_tokens", "keep_last"},
}
_SUBAGENT = {"description", "system_prompt"}
_SUBAGENT_OPTIONAL = {"model", "tools"}
_SUBAGENT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _line_of(text: str, key: str) -> int | None:
    """The line where ``key`` (dotted) is set or its table opens, when it can be found."""
    last = key.rsplit(".", 1)[-1]
    table, _, _ = key.rpartition(".")
    patterns = [rf"^\s*\[\[?\s*{re.escape(key)}\s*\]", rf"^\s*{re.escape(key)}\s*="]
    inside = not table
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(r"^\s*\[", line):
            inside = bool(table) and re.match(rf"^\s*\[\[?\s*{re.escape(table)}\s*\]", line) is not None
        if any(re.match(pattern, line) for pattern in patterns):
            return number
        if inside and re.match(rf"^\s*{re.escape(last)}\s*=", line):
            return number
    return None


def setting_error(path: Path, key: str, reason: str) -> ConfigError:
    """A ``ConfigError`` for ``key`` of the settings file ``path``, with the key's line when it can be found."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ConfigError(path, key, reason)
    return ConfigError(path, key, reason, _line_of(text, key))


class _Reader:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text

    def fail(self, key: str, reason: str) -> ConfigError:
        return ConfigError(self.path, key, reason, _line_of(self.text, key))

    def table(self, key: str, value: Any, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table, got {type(value).__name__} {value!r}")
        for name in value:
            if name not in allowed:
                raise self.fail(f"{key}.{name}", f"unknown key (known: {', '.join(sorted(allowed))})")
        return value

    def strings(self, key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise self.fail(key, f"must be a list of non-empty strings, got {value!r}")
        return tuple(value)

    def whole(self, key: str, value: Any, least: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, got {value!r}")
        if value < least:
            raise self.fail(key, f"must be at least {least}, got {value}")
        return value

    def model(self, key: str, value: Any) -> str:
        model = self.text_value(key, value)
        if model != "scripted" and not names_a_provider(model):
            raise self.fail(key, f"unknown model {model!r}: use scripted or {MODEL_SPECS}")
        return model

    def tools(self, key: str, value: Any) -> tuple[str, ...]:
        names = self.strings(key, value)
        for name in names:
            if name not in SUBAGENT_TOOLS:
                raise self.fail(key, f"unknown tool {name!r} (a subagent may have: {', '.join(SUBAGENT_TOOLS)})")
        return tuple(dict.fromkeys(names))

    def text_value(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        return value


def read_settings(path: Path, *, user: bool) -> Settings:
    """The settings in ``path`` (a project's file, or the user's when ``user``); ConfigError when unusable."""
    try:
        raw_bytes = path.read_bytes()
    except OSError as error:
        raise ConfigError(path, None, f"cannot be read: {error.strerror or error}") from None
    try:
        text = raw_bytes.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError as error:
        raise ConfigError(path, None, f"is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        found = re.search(r"\(at line (\d+), column \d+\)", str(error))
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(error))
        raise ConfigError(path, None, f"is not valid TOML: {reason}", int(found[1]) if found else None) from None
    reader = _Reader(path, text)
    allowed = _TOP | _USER_ONLY if user else _TOP
    for key in data:
        if key not in allowed:
            hint = " (only the user's settings may trust projects)" if key in _USER_ONLY else ""
            raise reader.fail(key, f"unknown key{hint} (known: {', '.join(sorted(allowed))})")
    fields: dict[str, Any] = {}
    if "model" in data:
        fields["model"] = reader.model("model", data["model"])
    if "permissions" in data:
        table = reader.table("permissions", data["permissions"], _TABLES["permissions"])
        rules: dict[str, Verdict] = {}
        for verdict in VERDICTS:
            for pattern in reader.strings(f"permissions.{verdict}", table.get(verdict, [])):
                if pattern in rules:
                    raise reader.fail(f"permissions.{verdict}", f"{pattern!r} is also under {rules[pattern]}")
                rules[pattern] = verdict
        fields["permissions"] = rules
    if "plan_mode" in data:
        table = reader.table("plan_mode", data["plan_mode"], _TABLES["plan_mode"])
        if "writable" in table:
            fields["plan_writable"] = reader.strings("plan_mode.writable", table["writable"])
    if "compaction" in data:
        table = reader.table("compaction", data["compaction"], _TABLES["compaction"])
        if "threshold_tokens" in table:
            fields["compaction_threshold"] = reader.whole("compaction.threshold_tokens", table["threshold_tokens"], 0)
        if "keep_last" in table:
            fields["compaction_keep_last"] = reader.whole("compaction.keep_last", table["keep_last"], 1)
    if "subagents" in data:
        named = data["subagents"]
        table = reader.table("subagents", named, set(named) if isinstance(named, dict) else set())
        subagents = []
        for name, body in table.items():
            key = f"subagents.{name}"
            if not _SUBAGENT_NAME.fullmatch(name):
                raise reader.fail(key, "a subagent's name must be 1-64 letters, digits, '_' or '-'")
            entry = reader.table(key, body, _SUBAGENT | _SUBAGENT_OPTIONAL)
            for needed in sorted(_SUBAGENT - set(entry)):
                raise reader.fail(key, f"{needed} is missing")
            subagents.append(
                Subagent(
                    name,
                    reader.text_value(f"{key}.description", entry["description"]),
                    reader.text_value(f"{key}.system_prompt", entry["system_prompt"]),
                    reader.model(f"{key}.model", entry["model"]) if "model" in entry else None,
                    reader.tools(f"{key}.tools", entry["tools"]) if "tools" in entry else None,
                )
            )
        fields["subagents"] = tuple(subagents)
    if "trusted_projects" in data:
        fields["trusted_projects"] = reader.strings("trusted_projects", data["trusted_projects"])
    return Settings(path, **fields)

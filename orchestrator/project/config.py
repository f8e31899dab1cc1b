"""The configuration in force: flags, then the project's files, then the user's settings, each value with its source.

``load_config(Flags(...), project=DIR)`` looks in ``DIR`` and its parents up to
the repository's top (the folder holding ``.git``; at most eight levels) for
``.orchestrator.toml``, ``.mcp.json``, AGENTS.md files and skills folders
(``.orchestrator/skills``, ``.agents/skills``, ``.claude/skills``); the nearer
folder wins. The user's ``$XDG_CONFIG_HOME/orchestrator/settings.toml`` comes
last. MCP servers of a project file are started only when the project is trusted
(``--trust-project`` or the user's ``trusted_projects``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from orchestrator.extensions.agents_md import instruction_folders
from orchestrator.extensions.mcp.servers import HttpServer, MCPServer, StdioServer
from orchestrator.extensions.tool_approval import Verdict
from orchestrator.project.mcp_json import MCP_FILE, Expansion, read_mcp_json
from orchestrator.project.settings import PROJECT_FILE, USER_FILE, ConfigError, Settings, Subagent, read_settings

__all__ = ["ConfigError", "Flags", "ProjectConfig", "Sourced", "load_config", "user_settings_path"]

DEFAULT_ASK = ("write_file", "edit_file", "bash")
DEFAULT_PLAN_WRITABLE = ("PLAN.md", "plans/**")
SKILL_FOLDERS = (".orchestrator/skills", ".agents/skills", ".claude/skills")
MAX_PARENTS = 8
DEFAULT = "default"


@attrs.frozen
class Sourced:
    """A value and where it came from (a flag, a file's path, or ``default``)."""

    value: Any
    source: str


@attrs.frozen
class Flags:
    """What a command line says about the configuration (None or empty: it says nothing)."""

    model: str | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    yes: bool = False
    trust_project: bool = False


@attrs.frozen
class McpEntry:
    """One MCP server of the configuration; ``reason`` says why it is not started (None: it is started);
    ``expansions`` are the ``${VAR}`` its file's entry had."""

    server: MCPServer
    source: str
    reason: str | None = None
    expansions: tuple[Expansion, ...] = ()


@attrs.frozen
class ProjectConfig:
    """The configuration in force for one command."""

    project: Path | None
    files: tuple[Path, ...]
    model: Sourced
    permissions: Mapping[str, Sourced]
    plan_writable: Sourced
    compaction_threshold: Sourced
    compaction_keep_last: Sourced
    subagents: tuple[tuple[Subagent, str], ...]
    agents_md: tuple[Path, ...]
    skills: tuple[Path, ...]
    mcp: tuple[McpEntry, ...]
    trusted: Sourced

    @property
    def policy_rules(self) -> dict[str, Verdict]:
        return {pattern: sourced.value for pattern, sourced in self.permissions.items()}

    @property
    def started_servers(self) -> tuple[MCPServer, ...]:
        return tuple(entry.server for entry in self.mcp if entry.reason is None)

    def _relative(self, path: Path) -> str:
        if self.project is not None:
            for folder in (self.project, *self.project.parents):
                if folder in path.parents:
                    return str(path.relative_to(folder))
        return str(path)

    def fingerprint(self) -> str:
        """A stable digest of the effective configuration (values and instruction texts, not where they came from)."""
        agents = []
        for path in self.agents_md:
            try:
                agents.append(hashlib.sha256(path.read_bytes()).hexdigest())
            except OSError:
                agents.append("unreadable")
        body = {
            "model": self.model.value,
            "permissions": sorted(self.policy_rules.items()),
            "plan_writable": list(self.plan_writable.value),
            "compaction": [self.compaction_threshold.value, self.compaction_keep_last.value],
            "subagents": [_subagent_values(s) for s, _ in self.subagents],
            "agents_md": agents,
            "skills": [self._relative(path) for path in self.skills],
            "mcp": [[_describe(entry.server), entry.reason is None] for entry in self.mcp],
        }
        digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        return f"sha256:{digest[:32]}"


def _subagent_values(subagent: Subagent) -> list[Any]:
    """What the fingerprint takes of a subagent; its model and tools only when given, so that a configuration
    without them keeps the digest it had before subagents could name them."""
    values: list[Any] = [subagent.name, subagent.description, subagent.system_prompt]
    if subagent.model is not None or subagent.tools is not None:
        values += [subagent.model, None if subagent.tools is None else list(subagent.tools)]
    return values


def _describe(server: MCPServer) -> list[Any]:
    if isinstance(server, StdioServer):
        return [server.name, "stdio", server.command, list(server.args), sorted((server.env or {}).items())]
    assert isinstance(server, HttpServer)
    return [server.name, "http", server.url, sorted(server.headers)]


def _override(permissions: dict[str, Sourced], layer: Mapping[str, Sourced]) -> None:
    """Set a higher layer's rules: a name or pattern of it replaces the lower layers' rules for the names it
    matches."""
    for pattern in layer:
        for lower in [name for name in permissions if fnmatch.fnmatchcase(name, pattern)]:
            del permissions[lower]
    permissions.update(layer)


def user_settings_path() -> Path:
    """``$XDG_CONFIG_HOME/orchestrator/settings.toml`` (``~/.config`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "orchestrator" / USER_FILE


def _trusted_by(user: Settings | None, project: Path) -> str | None:
    if user is None:
        return None
    for entry in user.trusted_projects:
        folder = Path(os.path.expanduser(entry)).resolve()
        if project == folder or folder in project.parents:
            return str(user.path)
    return None


def load_config(flags: Flags, project: str | os.PathLike[str] | None) -> ProjectConfig:
    """The configuration for ``flags`` and the project in ``project`` (None: no project files); ConfigError when
    a file is unusable."""
    user_path = user_settings_path()
    user = read_settings(user_path, user=True) if user_path.is_file() else None
    folders: list[Path] = []
    start: Path | None = None
    if project is not None:
        start = Path(project).resolve()
        if not start.is_dir():
            raise ConfigError(start, None, "the project is not a directory")
        folders = instruction_folders(start, MAX_PARENTS)
    outermost_first = list(reversed(folders))
    files: list[Path] = []
    layers: list[Settings] = [] if user is None else [user]
    if user is not None:
        files.append(user.path)
    for folder in outermost_first:
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
            layers.append(read_settings(candidate, user=False))
            files.append(candidate)
    # model
    model = Sourced(None, DEFAULT)
    for layer in layers:
        if layer.model is not None:
            model = Sourced(layer.model, str(layer.path))
    if flags.model is not None:
        model = Sourced(flags.model, "flag --model")
    # permissions: defaults, then user, then project (outermost first), then flags
    permissions: dict[str, Sourced] = {name: Sourced("ask", DEFAULT) for name in DEFAULT_ASK}
    for layer in layers:
        _override(
            permissions, {pattern: Sourced(verdict, str(layer.path)) for pattern, verdict in layer.permissions.items()}
        )
    if flags.yes:
        permissions = {p: s for p, s in permissions.items() if s.value != "ask"}
    given = {pattern: Sourced("allow", "flag --allow") for pattern in flags.allow}
    given.update({pattern: Sourced("deny", "flag --deny") for pattern in flags.deny})
    _override(permissions, given)
    plan_writable = Sourced(DEFAULT_PLAN_WRITABLE, DEFAULT)
    threshold = Sourced(0, DEFAULT)
    keep_last = Sourced(4, DEFAULT)
    subagents: dict[str, tuple[Subagent, str]] = {}
    for layer in layers:
        if layer.plan_writable is not None:
            plan_writable = Sourced(layer.plan_writable, str(layer.path))
        if layer.compaction_threshold is not None:
            threshold = Sourced(layer.compaction_threshold, str(layer.path))
        if layer.compaction_keep_last is not None:
            keep_last = Sourced(layer.compaction_keep_last, str(layer.path))
        for subagent in layer.subagents:
            subagents[subagent.name] = (subagent, str(layer.path))
    # trust
    trusted = Sourced(False, DEFAULT)
    if start is not None:
        by_user = _trusted_by(user, start)
        if by_user is not None:
            trusted = Sourced(True, f"{by_user} trusted_projects")
    if flags.trust_project:
        trusted = Sourced(True, "flag --trust-project")
    # .mcp.json, nearer wins by name
    servers: dict[str, tuple[MCPServer, str, tuple[Expansion, ...]]] = {}
    for folder in outermost_first:
        candidate = folder / MCP_FILE
        if candidate.is_file():
            files.append(candidate)
            for declared in read_mcp_json(candidate):
                servers[declared.server.name] = (declared.server, str(candidate), declared.expansions)
    untrusted = (
        "the project is not trusted (pass --trust-project, or list it in trusted_projects of " + str(user_path) + ")"
    )
    mcp = tuple(
        McpEntry(server, source, None if trusted.value else untrusted, expansions)
        for server, source, expansions in servers.values()
    )
    agents_md = tuple(folder / "AGENTS.md" for folder in outermost_first if (folder / "AGENTS.md").is_file())
    skills = tuple(folder / name for folder in folders for name in SKILL_FOLDERS if (folder / name).is_dir())
    return ProjectConfig(
        project=start,
        files=tuple(files),
        model=model,
        permissions=permissions,
        plan_writable=plan_writable,
        compaction_threshold=threshold,
        compaction_keep_last=keep_last,
        subagents=tuple(subagents.values()),
        agents_md=agents_md,
        skills=skills,
        mcp=mcp,
        trusted=trusted,
    )

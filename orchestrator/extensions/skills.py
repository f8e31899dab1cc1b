"""SkillsExtension: instructions a model loads when it needs them.

A skill is a folder holding a ``SKILL.md`` whose front matter gives its
``name`` (lowercase letters, digits and hyphens, at most 64 characters) and a
``description`` (at most 1,024 characters), followed by the body: the
instructions themselves. ``SkillsExtension(paths)`` looks in each path, which
is either a skill folder or a folder of skill folders, again in every request
(``on_tool``), so skills added or edited while the application runs are seen.

Each request then gets a system message listing every skill by name and
description, and the ``load_skill(name, file=None)`` tool: it returns the body
of the named skill's SKILL.md, or with ``file`` another file of that skill's
folder (its scripts or references). The name is looked up among the skills
found, never turned into a path, and ``file`` is opened beneath the skill's
folder only (symlinks followed but never out of it; FIFOs and devices refused);
what is read is cut at ``max_bytes``.

A folder whose SKILL.md cannot be read, has no valid front matter, or repeats
a name found before (the first path wins) is not offered; each such problem is
logged as a warning and kept in ``last_problems``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import attrs
import trio

from orchestrator.checks import each, whole
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.files.capped_read import CappedText, read_capped, read_capped_fd
from orchestrator.extensions.files.confine import Beneath, PathOutsideRoot, open_regular
from orchestrator.extensions.front_matter import FrontMatterError, parse
from orchestrator.extensions.instructions import add_instructions
from orchestrator.messages import SystemMessage
from orchestrator.tools import ToolDefinition, build_tool

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

log = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024


@attrs.frozen
class Skill:
    """A skill that was found: its name, what it is for and its folder."""

    name: str
    description: str
    folder: Path


@attrs.frozen
class Catalog:
    """The skills found in the configured paths, and why any folder was left out."""

    skills: tuple[Skill, ...]
    problems: tuple[str, ...]

    def get(self, name: str) -> Skill | None:
        return next((skill for skill in self.skills if skill.name == name), None)


def _candidates(path: Path) -> list[Path]:
    """``path`` itself when it is a skill folder, else its subfolders (sorted by name)."""
    if (path / SKILL_FILE).exists():
        return [path]
    try:
        return sorted(child for child in path.iterdir() if child.is_dir())
    except OSError:
        return []


def _read_skill(folder: Path, max_bytes: int) -> Skill:
    """The skill in ``folder``; ValueError or OSError saying what is wrong with it."""
    document = parse(read_capped(folder / SKILL_FILE, max_bytes).text)
    name = document.fields.get("name", "").strip()
    description = " ".join(document.fields.get("description", "").split())
    if not name:
        raise FrontMatterError("the front matter has no 'name'")
    if len(name) > MAX_NAME or not NAME_PATTERN.match(name):
        raise FrontMatterError(
            f"the name {name[:80]!r} is not lowercase letters, digits and hyphens of at most {MAX_NAME} characters"
        )
    if not description:
        raise FrontMatterError("the front matter has no 'description'")
    if len(description) > MAX_DESCRIPTION:
        raise FrontMatterError(f"the description is longer than {MAX_DESCRIPTION} characters")
    return Skill(name, description, folder)


def discover(paths: Iterable[Path], max_bytes: int) -> Catalog:
    """Every skill in ``paths`` (blocking; runs in a thread)."""
    skills: list[Skill] = []
    problems: list[str] = []
    for path in paths:
        for folder in _candidates(path):
            if not (folder / SKILL_FILE).exists():
                continue
            try:
                skill = _read_skill(folder, max_bytes)
            except (OSError, ValueError) as problem:
                reason = problem.strerror if isinstance(problem, OSError) and problem.strerror else str(problem)
                problems.append(f"{folder / SKILL_FILE}: {reason}")
                continue
            first = next((found for found in skills if found.name == skill.name), None)
            if first is not None:
                problems.append(f"{folder / SKILL_FILE}: the name {skill.name!r} is already used by {first.folder}")
                continue
            skills.append(skill)
    for reason in problems:
        log.warning("skill not offered: %s", reason)
    return Catalog(tuple(skills), tuple(problems))


def read_skill_file(skill: Skill, file: str | None, max_bytes: int) -> str:
    """The body of ``skill``'s SKILL.md, or the text of ``file`` beneath its folder."""
    if file is None or PurePosixPath(file) == PurePosixPath(SKILL_FILE):
        body = parse(read_capped(skill.folder / SKILL_FILE, max_bytes).text).body
        return f"# Skill: {skill.name}\n(folder: {skill.folder})\n\n{body}"
    beneath = Beneath(PurePosixPath(skill.folder.resolve()))
    with beneath.locate(file) as place:
        fd, _ = open_regular(place)
        try:
            content: CappedText = read_capped_fd(fd, max_bytes, place.relative)
        finally:
            os.close(fd)
    return content.with_note("the file is longer than the limit")


class SkillsExtension(AgentExtension):
    """List the skills in ``paths`` in the system instructions and offer ``load_skill``."""

    def __init__(
        self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *, max_bytes: int = 256_000
    ) -> None:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        given = each((str, os.PathLike), "a str or os.PathLike path", "SkillsExtension.paths", paths)
        whole(1).check("SkillsExtension.max_bytes", max_bytes)
        self.paths = tuple(Path(path).resolve() for path in given)
        self.max_bytes = max_bytes
        self.last_problems: tuple[str, ...] = ()
        self.tool = self._load_skill_tool()

    @property
    def _state_key(self) -> str:
        return f"skills:{self.name}"

    def discover(self) -> Catalog:
        """The skills as they are on disk now (blocking; runs in a thread)."""
        catalog = discover(self.paths, self.max_bytes)
        self.last_problems = catalog.problems
        return catalog

    @property
    def skills(self) -> tuple[Skill, ...]:
        """The skills on disk now (blocking)."""
        return self.discover().skills

    def instructions(self, catalog: Catalog) -> SystemMessage | None:
        if not catalog.skills:
            return None
        lines = [f"- {skill.name}: {skill.description}" for skill in catalog.skills]
        return SystemMessage(
            "Skills are instructions for particular tasks. When a task matches a skill's description, "
            "call load_skill with its name before you start, and follow what it says. Available skills:\n"
            + "\n".join(lines)
        )

    def _load_skill_tool(self) -> ToolDefinition:
        extension = self

        def load(name: str, file: str | None) -> str:
            catalog = extension.discover()
            skill = catalog.get(name)
            if skill is None:
                known = ", ".join(found.name for found in catalog.skills) or "none"
                raise ValueError(f"no skill is named {name[:80]!r}; available: {known}")
            try:
                return read_skill_file(skill, file, extension.max_bytes)
            except PathOutsideRoot as problem:
                raise PathOutsideRoot(f"{file!r} is outside the skill's folder") from problem

        async def load_skill(name: str, file: str | None = None) -> str:
            """Load a skill's instructions (or another file of the skill) by the skill's name.

            Args:
                name: the skill's name, as listed in the instructions
                file: a file inside the skill's folder, relative to it; omit for the skill's instructions
            """
            return await trio.to_thread.run_sync(load, name, file)

        return build_tool(load_skill)

    async def on_tool(self, context: AgentRunContext) -> None:
        catalog = await trio.to_thread.run_sync(self.discover)
        context.state[self._state_key] = catalog
        if catalog.skills:
            context.register_tool(self.tool)

    async def on_state(self, context: AgentRunContext) -> None:
        catalog = context.state.get(self._state_key)
        message = self.instructions(catalog) if isinstance(catalog, Catalog) else None
        if message is None:
            return
        add_instructions(context, message)

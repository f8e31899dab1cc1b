"""AgentsMdExtension: a project's AGENTS.md files as system instructions.

In ``on_state`` of every request it looks for the instruction file (``AGENTS.md``
by default) in ``root`` and in its parent folders, at most ``max_parents``
levels up and never above the folder holding ``.git`` (the top of the
repository). The files found are joined into one system message, the outermost
first and the one in ``root`` last, so the most specific instructions come last.
The message is placed after the leading system messages (the agent's own
``system_prompt`` stays first) and is request-scoped: it is read again for every
request and never stored in session history.

Each file is read without blocking (a FIFO named AGENTS.md is refused, not
waited on), at most ``max_bytes`` of it (the rest is replaced by a note), and
invalid UTF-8 is replaced. A file that cannot be read is left out with a
warning in the log and its reason in ``last_problems``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from orchestrator.checks import path_like, whole
from orchestrator.checks import text as _text
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.files.capped_read import read_capped
from orchestrator.extensions.instructions import add_instructions
from orchestrator.messages import SystemMessage

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

log = logging.getLogger(__name__)

HEADER = (
    "Project instructions from AGENTS.md files follow, the outermost first and the nearest last "
    "(when they disagree, the nearer file wins). Follow them unless the user asks otherwise."
)


@attrs.frozen
class InstructionFile:
    """One instruction file that was found, and what was read of it."""

    path: Path
    text: str


def instruction_folders(root: Path, max_parents: int) -> list[Path]:
    """``root`` and its parents up to ``max_parents`` levels, stopping at a repository's top; nearest first."""
    folders = [root]
    for parent in list(root.parents)[:max_parents]:
        if (folders[-1] / ".git").exists():
            break
        folders.append(parent)
    return folders


class AgentsMdExtension(AgentExtension):
    """Add the AGENTS.md files of ``root`` and its parents to each request's system instructions."""

    def __init__(
        self,
        root: str | os.PathLike[str] = ".",
        *,
        file_name: str = "AGENTS.md",
        max_parents: int = 8,
        max_bytes: int = 64_000,
    ) -> None:
        path_like().check("AgentsMdExtension.root", root)
        _text().check("AgentsMdExtension.file_name", file_name)
        whole(0).check("AgentsMdExtension.max_parents", max_parents)
        whole(1).check("AgentsMdExtension.max_bytes", max_bytes)
        if not file_name or "/" in file_name or file_name in (".", ".."):
            raise ValueError(f"AgentsMdExtension.file_name must be a plain file name, got {file_name!r}")
        self.root = Path(root).resolve()
        self.file_name = file_name
        self.max_parents = max_parents
        self.max_bytes = max_bytes
        self.last_problems: tuple[str, ...] = ()

    def find(self) -> list[InstructionFile]:
        """The instruction files as they are now, the outermost first (blocking; runs in a thread)."""
        found: list[InstructionFile] = []
        problems: list[str] = []
        for folder in instruction_folders(self.root, self.max_parents):
            path = folder / self.file_name
            try:
                text = read_capped(path, self.max_bytes).with_note("the file is longer than the limit")
            except FileNotFoundError:
                continue
            except OSError as problem:
                problems.append(f"{path}: {problem.strerror or problem}")
                log.warning("instruction file %s not read: %s", path, problem.strerror or problem)
                continue
            if text.strip():
                found.append(InstructionFile(path, text))
        self.last_problems = tuple(problems)
        return found[::-1]

    def instructions(self, files: list[InstructionFile]) -> SystemMessage | None:
        """The system message made of ``files`` (None when there are none)."""
        if not files:
            return None
        sections = [f"## {file.path}\n\n{file.text.strip()}" for file in files]
        return SystemMessage("\n\n".join([HEADER, *sections]))

    async def on_state(self, context: AgentRunContext) -> None:
        message = self.instructions(await trio.to_thread.run_sync(self.find))
        if message is None:
            return
        add_instructions(context, message)

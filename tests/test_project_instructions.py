"""AGENTS.md files and skills: what the model is told, what load_skill returns, and what is refused."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from support import asks

from orchestrator import (
    AssistantMessage,
    ScriptedModel,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    create_agent,
)
from orchestrator.extensions.agents_md import AgentsMdExtension, instruction_folders
from orchestrator.extensions.front_matter import FrontMatterError, parse
from orchestrator.extensions.skills import SkillsExtension

REPO = Path(__file__).resolve().parents[1]


def system_texts(model: ScriptedModel, call: int = 0) -> list[str]:
    return [m.content for m in model.requests[call].messages if isinstance(m, SystemMessage)]


def tool_results(client: object) -> dict[str, ToolMessage]:
    history = client.agent.history.load("default")  # type: ignore[attr-defined]
    return {m.tool_call_id: m for m in history if isinstance(m, ToolMessage)}


# AGENTS.md ------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """outer/AGENTS.md above a repository whose top and a subfolder each have one."""
    (tmp_path / "AGENTS.md").write_text("ABOVE THE REPOSITORY: never seen\n")
    repo = tmp_path / "outer" / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "AGENTS.md").write_text("Run the tests with make test.\n")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "AGENTS.md").write_text("In pkg, use tabs.\n")
    return repo


async def test_agents_md_files_reach_the_model_outermost_first_after_the_system_prompt(project: Path) -> None:
    model = ScriptedModel([AssistantMessage("ok"), AssistantMessage("again")])
    client = await create_agent(
        model, system_prompt="You are terse.", extensions=[AgentsMdExtension(project / "pkg")]
    )
    await client.run("hi")

    texts = system_texts(model)
    assert texts[0] == "You are terse."
    instructions = texts[1]
    assert instructions.index("make test") < instructions.index("use tabs")
    assert f"## {project / 'AGENTS.md'}" in instructions and f"## {project / 'pkg' / 'AGENTS.md'}" in instructions
    assert "never seen" not in instructions  # the walk stops at the repository's top
    assert isinstance(model.requests[0].messages[2], UserMessage)

    # Request-scoped: read again for the next request, never stored in the session's history.
    (project / "pkg" / "AGENTS.md").write_text("In pkg, use spaces now.\n")
    await client.run("again")
    assert "use spaces now" in system_texts(model, 1)[1]
    assert sum("use tabs" in text for text in system_texts(model, 1)) == 0
    assert not any(isinstance(m, SystemMessage) for m in client.agent.history.load("default"))


async def test_agents_md_without_files_adds_nothing(tmp_path: Path) -> None:
    model = ScriptedModel([AssistantMessage("ok")])
    client = await create_agent(model, extensions=[AgentsMdExtension(tmp_path, max_parents=0)])
    await client.run("hi")
    assert system_texts(model) == []


def test_instruction_folders_respect_the_parent_limit(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert instruction_folders(deep, 0) == [deep]
    assert instruction_folders(deep, 2) == [deep, deep.parent, deep.parent.parent]
    (deep.parent / ".git").mkdir()
    assert instruction_folders(deep, 5) == [deep, deep.parent]


async def test_a_hostile_agents_md_is_bounded_decoded_and_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / ".git").mkdir(parents=True)
    (root / "AGENTS.md").write_bytes(b"\xff\xfe bad bytes " + b"x" * 500)
    fifo_root = root / "sub"
    fifo_root.mkdir()
    os.mkfifo(fifo_root / "AGENTS.md")
    extension = AgentsMdExtension(fifo_root, max_bytes=100)
    model = ScriptedModel([AssistantMessage("ok")])
    client = await create_agent(model, extensions=[extension])
    with trio.fail_after(10):
        await client.run("hi")

    (instructions,) = system_texts(model)
    assert "\ufffd\ufffd bad bytes" in instructions
    assert "[truncated: 413 more bytes; the file is longer than the limit]" in instructions
    assert len(extension.last_problems) == 1
    assert "sub/AGENTS.md" in extension.last_problems[0] and "not a regular file" in extension.last_problems[0]


def test_agents_md_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="plain file name"):
        AgentsMdExtension(".", file_name="../AGENTS.md")
    with pytest.raises(ValueError, match="max_bytes"):
        AgentsMdExtension(".", max_bytes=0)


# skills -----------------------------------------------------------------------------


def write_skill(folder: Path, front: str, body: str = "Do the thing.\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\n{front}\n---\n{body}")
    return folder


@pytest.fixture
def library(tmp_path: Path) -> Path:
    skills = tmp_path / "skills"
    write_skill(
        skills / "pdf",
        'name: pdf-forms\ndescription: >\n  Fill PDF forms\n  with the helper script.',
        "# PDF forms\nRun scripts/fill.py.\n",
    )
    (skills / "pdf" / "scripts").mkdir()
    (skills / "pdf" / "scripts" / "fill.py").write_text("print('filled')\n")
    write_skill(skills / "release", 'name: "release"\ndescription: Cut a release.')
    write_skill(skills / "broken", "description: no name here")
    write_skill(skills / "shadow", "name: release\ndescription: a second skill with a taken name")
    write_skill(skills / "BadName", "name: Bad_Name\ndescription: not a valid name")
    (skills / "empty").mkdir()
    return skills


async def test_skills_are_listed_and_loaded_by_name(library: Path, tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            asks(
                ToolCall("body", "load_skill", {"name": "pdf-forms"}),
                ToolCall("script", "load_skill", {"name": "pdf-forms", "file": "scripts/fill.py"}),
                ToolCall("unknown", "load_skill", {"name": "nope"}),
            ),
            AssistantMessage("done"),
        ]
    )
    extension = SkillsExtension(library)
    client = await create_agent(model, extensions=[extension])
    await client.run("fill the form")

    (listing,) = system_texts(model)
    assert "- pdf-forms: Fill PDF forms with the helper script." in listing
    assert "- release: Cut a release." in listing
    assert "load_skill" in listing and "Bad_Name" not in listing and "no name here" not in listing
    assert "load_skill" in {tool.name for tool in model.requests[0].tools}

    results = tool_results(client)
    assert results["body"].status is ToolStatus.SUCCEEDED
    assert results["body"].content.startswith("# Skill: pdf-forms\n")
    assert "# PDF forms\nRun scripts/fill.py." in results["body"].content
    assert "description:" not in results["body"].content  # the front matter is not repeated
    assert (results["script"].status, results["script"].content) == (ToolStatus.SUCCEEDED, "print('filled')\n")
    assert results["unknown"].status is ToolStatus.FAILED
    assert "no skill is named 'nope'; available: pdf-forms, release" in results["unknown"].content

    problems = "\n".join(extension.last_problems)
    assert "broken/SKILL.md: the front matter has no 'name'" in problems
    assert "shadow/SKILL.md: the name 'release' is already used by" in problems
    assert "BadName/SKILL.md: the name 'Bad_Name' is not lowercase letters" in problems


async def test_load_skill_stays_inside_the_skill_folder(library: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("secret value\n")
    (library / "pdf" / "leak").symlink_to(tmp_path / "secret.txt")
    os.mkfifo(library / "pdf" / "pipe")
    attempts = {
        "dotdot": "../release/SKILL.md",
        "absolute": str(tmp_path / "secret.txt"),
        "symlink": "leak",
        "fifo": "pipe",
        "folder": "scripts",
    }
    model = ScriptedModel(
        [
            asks(*(ToolCall(key, "load_skill", {"name": "pdf-forms", "file": path}) for key, path in attempts.items())),
            AssistantMessage("done"),
        ]
    )
    client = await create_agent(model, extensions=[SkillsExtension([library])])
    with trio.fail_after(10):
        await client.run("escape")

    results = tool_results(client)
    assert set(results) == set(attempts)
    for key, message in results.items():
        assert message.status is ToolStatus.FAILED, key
        assert "secret value" not in message.content and "Cut a release" not in message.content
    for key in ("dotdot", "absolute", "symlink"):
        assert "outside the skill's folder" in results[key].content, key
    assert "not a regular file" in results["fifo"].content
    assert "is a directory" in results["folder"].content


async def test_skills_are_found_again_for_each_request_and_a_single_skill_folder_works(tmp_path: Path) -> None:
    single = write_skill(tmp_path / "one", "name: one\ndescription: The only one.")
    extension = SkillsExtension([single, tmp_path / "missing"])
    model = ScriptedModel([AssistantMessage("a"), AssistantMessage("b")])
    client = await create_agent(model, extensions=[extension])
    await client.run("first")
    assert "- one: The only one." in system_texts(model)[0]

    (single / "SKILL.md").write_text("---\nname: one\ndescription: Edited.\n---\nbody\n")
    await client.run("second")
    assert "- one: Edited." in system_texts(model, 1)[0]


async def test_no_skills_no_tool_and_no_instructions(tmp_path: Path) -> None:
    model = ScriptedModel([AssistantMessage("ok")])
    client = await create_agent(model, extensions=[SkillsExtension(tmp_path)])
    await client.run("hi")
    assert system_texts(model) == []
    assert "load_skill" not in {tool.name for tool in model.requests[0].tools}


def test_front_matter_forms_and_errors() -> None:
    document = parse("---\nname: x\ndescription: |\n  line one\n  line two\n# a comment\n---\nbody\n")
    assert document.fields == {"name": "x", "description": "line one\nline two"}
    assert document.body == "body"
    assert parse("\ufeff---\nname: 'it''s'\n---\n").fields == {"name": "it's"}
    for text, problem in [
        ("no front matter", "does not start"),
        ("---\nname: x\n", "no closing"),
        ("---\njust words\n---\n", "line 2 is not 'key: value'"),
        ("---\n  indented\n---\n", "continues no field"),
        ("---\na: 1\na: 2\n---\n", "repeats the field 'a'"),
    ]:
        with pytest.raises(FrontMatterError, match=problem):
            parse(text)


def test_the_skills_example_prints_what_its_page_says(tmp_path: Path) -> None:
    text = (REPO / "docs" / "extensions" / "skills.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- example: skills -->\n```python\n(.*?)\n```\n\nprints\n\n```text\n(.*?)```", text, re.S)
    assert found is not None, "docs/extensions/skills.md has no skills example"
    code, printed = found.groups()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed
